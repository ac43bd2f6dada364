"""The operator's side of citizens asking for citizens: list, approve, reject.

The broker records each request a citizen makes (citizen.broker.onboarding); a request
becomes a citizen only when the operator approves it, as root, with the existing
onboarding (citizen.admin.onboard) fed the recorded name, focus and strengths - no automated
privileged step acts on what a citizen wrote. The newcomer starts from the baseline
with the default identity and a note naming its creator and the reason it gave
(`templates/prompts/created_by.txt`; every value is substituted once, as text).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from citizen import config
from citizen.admin import founding
from citizen.admin.onboard import onboard
from citizen.broker import onboarding
from citizen.errors import CitizenError
from shared import clock
from shared.atomic import CorruptFile, write_json


class NewcomerError(CitizenError, LookupError):
    """A request cannot be found or decided; the message says what to do."""


def requests(pending_only: bool = False) -> list[dict[str, Any]]:
    """The recorded requests, oldest first.

    :raises NewcomerError: they cannot be read (not root on a server), or one is corrupt.
    """
    try:
        found = onboarding.all_requests()
    except PermissionError as exc:
        raise NewcomerError(f"{onboarding.requests_dir()} is the broker's - run as root "
                            "(sudo citizen onboard --list)") from exc
    except CorruptFile as exc:
        raise NewcomerError(str(exc)) from exc
    return [r for r in found if r["status"] in onboarding.OPEN or not pending_only]


def _find(ref: str, found: list[dict[str, Any]]) -> dict[str, Any]:
    """The pending request with id `ref`, or the one pending request for name `ref`."""
    hits = [r for r in found if r["id"] == ref] or \
        [r for r in found if r["name"] == ref and r["status"] in onboarding.OPEN]
    if not hits:
        raise NewcomerError(f"no request {ref} - `citizen onboard --list` shows them")
    record = hits[-1]
    if record["status"] not in onboarding.OPEN:
        raise NewcomerError(f"request {record['id']} was already {record['status']} "
                            f"({record.get('decided_at')}); nothing to do")
    return record


def identity_of(record: dict[str, Any]) -> str:
    """The newcomer's first identity: the default template, then who made it and why."""
    tpl = config.templates()
    return (tpl.identity(record["name"], record["focus"]) + "\n\n"
            + tpl.prompt("created_by", creator=record["author"], why=record["why"]).strip())


def approve(ref: str, *, enable: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Create the citizen request `ref` asks for; (the request, what changed).

    :raises NewcomerError: no such pending request, or its name was taken meanwhile.
    """
    with _decision(ref) as (record, others):
        problem = onboarding.name_problem(record["name"], others)
        if problem is not None:
            raise NewcomerError(f"request {record['id']}: {problem} - reject it "
                                f"(citizen onboard --reject {record['id']} --why ...)")
        changed = _create(record, enable)
        _decide(record, "approved", "")
    return record, changed


def reject(ref: str, why: str) -> dict[str, Any]:
    """Refuse request `ref`, saying why (its author reads the reason).

    :raises NewcomerError: no such pending request.
    """
    with _decision(ref) as (record, _):
        _decide(record, "rejected", why)
    return record


@contextmanager
def _decision(ref: str) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """The pending request `ref` and every other one, under the requests' lock."""
    folder = onboarding.requests_dir()
    if not folder.is_dir():
        raise NewcomerError(f"no requests yet (none in {folder})")
    if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
        raise NewcomerError(f"{folder} is the broker's - run as root (sudo citizen onboard)")
    with onboarding.held():
        found = requests()
        record = _find(ref, found)
        yield record, [r for r in found if r["id"] != record["id"]]


def _create(record: dict[str, Any], enable: bool) -> list[str]:
    strengths = tuple(record.get("strengths") or ())
    if config.server_mode():
        return onboard(record["name"], focus=record["focus"], enable=enable,
                       strengths=strengths, identity=identity_of(record))
    # Dev mode: one Unix user for everything - the home alone, as `citizen init` makes it.
    new = {"email": f"{record['name']}@experience.local", "focus": record["focus"],
           "strengths": list(strengths)}
    return founding.init_citizen(record["name"], new, identity=identity_of(record))


def _decide(record: dict[str, Any], status: str, why: str) -> None:
    """Write the decision into the request, which stays the broker's file."""
    path = onboarding.request_path(onboarding.requests_dir(), record)
    st = path.lstat()
    record.update(status=status, decided_at=clock.now(), decided_by=getpass.getuser(),
                  decision_why=why)
    # The broker's 0600 file still (root writes it on the broker's behalf).
    write_json(path, record, mode=0o600, owner=(st.st_uid, st.st_gid))
