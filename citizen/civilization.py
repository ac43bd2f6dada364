"""The one door from a citizen's code to the commons: who the citizens are, and the
protocols over the shared directory - evolution and review (`commons`), Thought World
(`consensus`), debates (`debates`), ThoughtStream (`streams`) - built once per process.

Everything in `citizen` that reaches a shared protocol comes through here; the shared
package's plain helpers (atomic writes, the one lock, the clock) it may import directly.
Creating the commons' tree is the operator's (`citizen.admin.founding`).
"""

from __future__ import annotations

import grp
import logging
import pwd
import time
from typing import TYPE_CHECKING

from citizen import config
from citizen.access import steps
from citizen.config import paths
from shared import clock
from shared.commons import Commons
from shared.errors import SharedError
from shared.identity import server_mode
from shared.records import effective_user
from shared.remote import Remote

if TYPE_CHECKING:  # the protocols are imported when first used (shared.commons says why)
    from shared.consensus import Consensus
    from shared.debates import Debates
    from shared.streams import Streams

log = logging.getLogger(__name__)
CITIZENS_GROUP = "citizens"  # every citizen's primary group on a server (setup_server.sh)


def citizens() -> list[str]:
    """The citizens of this civilization: every home under the root with a config.json."""
    root = paths.civ_root()
    if not root.is_dir():
        return []
    # Only names a citizen can have: a restore's hidden copy of a home is no citizen.
    return sorted(p.name for p in root.iterdir()
                  if paths.NAME_RE.match(p.name) and (p / "config.json").is_file())


def citizen_users() -> list[str]:
    """Every Unix user whose primary group is `citizens` - the citizens of a server,
    whatever their homes hold (a citizen can delete its own config.json)."""
    try:
        gid = grp.getgrnam(CITIZENS_GROUP).gr_gid
    except KeyError:
        return []
    return sorted(u.pw_name for u in pwd.getpwall() if u.pw_gid == gid)


_COMMONS: dict[tuple[str, str], tuple[Commons, int | None]] = {}
SETTLED_NS = 2_000_000_000  # a root changed more recently may be getting a home's config


def _root_settled() -> int | None:
    """The root's mtime once it has not changed for 2 s, else None. A home is made
    (the root changes) before its config.json is written: a fresh change is listed again."""
    try:
        mtime = paths.civ_root().stat().st_mtime_ns
    except OSError:
        return None
    return mtime if time.time_ns() - mtime > SETTLED_NS else None


def remote() -> Remote | None:
    """The commons the broker keeps, when this server is one of several (the operator's
    civilization.json is there), as the citizen this process runs as - the broker
    stamps that from the kernel's word anyway; None on a server of its own."""
    if not paths.civilization_file().is_file():
        return None
    from citizen.access.commons import BrokerCommons  # noqa: PLC0415 - several servers only

    return BrokerCommons(paths.broker_socket(), effective_user())


def everyone(far: Remote | None) -> list[str]:
    """Every citizen of the civilization: the broker's list on several servers - or, while
    it or the database cannot answer, this server's own (logged): its citizens go on."""
    if far is None:
        return citizens()
    try:
        return sorted(far.citizens())
    except (OSError, SharedError) as exc:
        log.warning("the civilization's citizens are not known now (%s); this server's own "
                    "are used", exc)
        return citizens()


def commons(tpl: config.Templates | None = None, approvals: int = 2) -> Commons:
    """This civilization's commons, built once per process (per root and templates):
    server mode and the validated templates are read once, the citizens again only when
    the root has changed (a listing of a thousand homes costs ~6 ms: every gate asks)."""
    tpl = tpl or config.templates()
    shared = paths.shared_dir()
    key = (str(shared), str(tpl.dir))
    handle, listed_at = _COMMONS.get(key, (None, None))
    settled = _root_settled()
    fresh = handle is not None and settled is not None and settled == listed_at
    far = remote()
    names = handle.citizens if handle is not None and fresh else everyone(far)
    medium = config.medium_programs()  # re-read: an operator's edit counts without restarts
    if handle is None or handle.citizens != names or handle.approvals != approvals \
            or handle.medium_programs != medium or (handle.remote is None) != (far is None):
        handle = Commons(shared, names, server_mode(shared), tpl.dir / "values.yaml",
                         {n: tpl.values_profile(n) for n in names}, approvals,
                         {n: paths.home(n).code for n in names}, medium,
                         merge_request=steps.merge, world_request=steps.world,
                         draw_request=steps.draw, remote=far)
    _COMMONS[key] = (handle, settled)
    return handle


def keep_diverse() -> None:
    """The daemon's daily job: the seed's weight diversity enforcement
    (shared.consensus.diversity; once a world day whichever daemon runs first). Never
    raises: a failure is logged and tomorrow's run tries again."""
    from shared.consensus import diversity  # noqa: PLC0415 - daily; at start ~90 ms of every command

    try:
        c = commons().consensus
        made = diversity.enforce(c.weights, c.citizens, clock.moment().date().isoformat(),
                                 c.framework.min_sigma)
    except (OSError, ValueError, SharedError) as exc:  # a full disk, a damaged history
        log.warning("weight diversity enforcement failed: %s", exc)
        return
    for line in made:
        log.info("diversity: %s's %s %+.3f (%s)", line["citizen"], line["value"],
                 line["delta"], line["reason"])


def consensus(tpl: config.Templates) -> Consensus:
    """The Thought World protocol over this civilization's commons."""
    return commons(tpl).consensus


def debates() -> Debates:
    """The structured debates in this civilization's commons."""
    return commons().debates


def streams() -> Streams:
    """ThoughtStream coordination in this civilization's commons."""
    return commons().streams


def persona(tpl: config.Templates, name: str) -> str:
    """A debater's persona, drawn from its identity template (the default one for a
    citizen the templates do not name)."""
    return tpl.identity(name)[:400]
