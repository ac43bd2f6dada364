"""The shared repositories, written by the broker alone (issue 28, breaks 3 and 4).

The baseline (`shared/baseline`) and the world (`shared/world`) belong to the broker's
user: citizens read them, nobody else writes them - not their files, `.git/config`,
hooks or refs - so nothing a citizen plants there runs as the next one to use them, and
main moves only through these routes:

- `POST /v1/experience/baseline/merge {change_id}`: the broker re-derives from the
  commons' records (authorship = the file's owner; each "worked" resting on its
  reporter's own run of the commit, `shared.change_rules`) that the change is verified and held
  by 2/3 of its author's peers, takes its objects from the author's bundle and cherry-picks it
  (`shared.evolution.Evolution.merge`), and refuses to build on commits no review put on
  main (`shared.baseline.unreviewed`).

Every git call is `shared.gitsafe`'s (hooks, fsmonitor, filters off; an explicit
GIT_DIR, so no safe.directory). One step at a time: the broker is the only writer.

On several servers (a "remote" in the operator's civilization.json) the merge is the same
step on this server's baseline, wrapped by `citizen.broker.remote.advance`: the remote's
main fetched first, the new main pushed after - a merge is on the shared baseline or
undone. Without a remote, the merge is exactly what it always was.

With the civilization's database (`Broker.database`), the records the merge re-derives
its verdict from are that database's rows, read through this broker's own pool
(`citizen.broker.gateway`): each row's author is the caller some server's kernel named,
and the database wrote it only for a citizen of that server - the file owner's proof,
across servers. The citizens counted are every server's, and the merge record is a row
too, created once the shared remote took the commit (a row is never deleted, so none
may name a commit the remote refused): every server's broker builds on every merge.
"""

from __future__ import annotations

import grp
import json
import pwd
import threading
from pathlib import Path
from typing import Any

from citizen import civilization
from citizen.broker import remote
from citizen.broker.gateway import Gateway
from citizen.broker.refused import Refused
from citizen.broker.server import Broker, route
from citizen.civilization import CITIZENS_GROUP
from citizen.config import paths
from shared import baseline as base_records
from shared.errors import Invalid, NotAllowed, NotFound, SharedError
from shared.evolution import Evolution
from shared.layout import Layout
from shared.remote import RemoteRefused

LOCK = threading.Lock()  # the broker is the repositories' only writer: one step at a time


def evolution_of(broker: Broker, citizen: str) -> Evolution:
    """The change records as this broker reads them for `citizen`'s request: this
    server's files, or on several servers the civilization's rows (`Gateway`, writing
    as `citizen`) and every server's citizens."""
    if getattr(broker, "database", None) is None:  # also a stand-in broker of none
        return Evolution(paths.shared_dir(), citizens(broker.server_mode), broker.server_mode)
    far = Gateway(broker, citizen)
    try:
        everyone = sorted(far.citizens())
    except RemoteRefused as exc:
        raise refusal(exc) from exc
    return Evolution(paths.shared_dir(), everyone, broker.server_mode, remote=far)


def citizens(server_mode: bool) -> list[str]:
    """The citizens, as the broker can tell: on a server the users whose primary group
    is `citizens` and who have a home (it cannot read inside the 0750 homes); in dev
    mode every home with a config."""
    if not server_mode:
        return civilization.citizens()
    gid = grp.getgrnam(CITIZENS_GROUP).gr_gid
    return sorted(u.pw_name for u in pwd.getpwall() if u.pw_gid == gid
                  and paths.NAME_RE.match(u.pw_name) and paths.civ_root().joinpath(
                      u.pw_name).is_dir())


def field(body: bytes, name: str) -> str:
    """A string field of a JSON request body.

    :raises Refused: not JSON, or no such string.
    """
    try:
        value = json.loads(body or b"{}").get(name)
    except (ValueError, AttributeError):
        value = None
    if not isinstance(value, str) or not value:
        raise Refused(400, "invalid_request_error", f'send {{"{name}": "…"}} as JSON')
    return value


def refusal(exc: SharedError | OSError) -> Refused:
    """The broker's answer to a step the records do not allow (its message says why)."""
    if isinstance(exc, remote.Unreachable):
        return Refused(503, "api_error", str(exc))
    if isinstance(exc, RemoteRefused):  # the database's answer, its status kept
        return Refused(exc.status, "api_error" if exc.status >= 500 else
                       "invalid_request_error", str(exc))
    if isinstance(exc, NotFound):
        return Refused(404, "not_found_error", str(exc))
    if isinstance(exc, NotAllowed):
        return Refused(409, "invalid_request_error", str(exc))
    if isinstance(exc, Invalid):
        return Refused(400, "invalid_request_error", str(exc))
    return Refused(500, "api_error", f"the step failed in the broker: {exc}")


@route("POST", "/v1/experience/baseline/merge")
def merge(broker: Broker, citizen: str, body: bytes) -> tuple[int, Any]:
    change_id = field(body, "change_id")
    evolution = evolution_of(broker, citizen)
    with LOCK:
        try:
            if evolution.remote is None:
                commit = remote.advance(evolution.baseline, "baseline",
                                        lambda: evolution.merge(change_id, citizen),
                                        lambda dropped: forget(paths.shared_dir(), dropped))
            else:  # recorded once the remote took it: a rewound step recorded nothing
                commit, record = remote.advance(evolution.baseline, "baseline",
                                                lambda: evolution.apply(change_id, citizen),
                                                lambda dropped: None)
                if record is not None:
                    evolution.record_merge(record)
        except (SharedError, OSError) as exc:
            raise refusal(exc) from exc
    return 200, {"change": change_id, "baseline_commit": commit}


def forget(shared_dir: Path, dropped: list[str]) -> None:
    """Remove the broker's records of merges whose commits the shared baseline never took:
    a record says a change is in the baseline, and these are not (asked again, they are
    merged again)."""
    gone, folder = set(dropped), Layout(shared_dir).merged
    for path in sorted(folder.glob("*.json")) if gone and folder.is_dir() else []:
        record = base_records.read_merged(shared_dir, path.stem, enforce=False)
        if record is not None and record.get("baseline_commit") in gone:
            path.unlink()
