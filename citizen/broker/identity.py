"""Who is calling the broker: the kernel says, through the socket's peer credentials.

PostgreSQL's peer authentication and D-Bus do the same: `SO_PEERCRED` gives the UID the
caller had when it connected, which no caller can forge. Nothing a caller sends names
it, except where the kernel cannot tell citizens apart: root (the operator's CLI) and,
in dev mode, the one user everything runs as - they name the citizen in a header.
"""

from __future__ import annotations

import grp
import os
import pwd

from citizen import config
from citizen.broker.refused import Refused
from citizen.civilization import CITIZENS_GROUP
from citizen.config import paths
from citizen.errors import ConfigError

CITIZEN_HEADER = "x-experience-citizen"  # counts only from root or, in dev mode, ourselves


def caller(uid: int, claimed: str | None, *, server_mode: bool) -> str:
    """The citizen a connection from `uid` speaks for.

    :raises Refused: not a citizen, or naming one it may not speak for.
    """
    if uid in (0, os.geteuid()):
        if not claimed:
            raise Refused(400, "invalid_request_error",
                          f"name the citizen in the {CITIZEN_HEADER} header")
        return known(claimed, templates_too=not server_mode)
    if not server_mode:
        raise Refused(403, "permission_error", "this dev-mode broker serves its own user only")
    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrnam(CITIZENS_GROUP)
    except KeyError as exc:
        raise Refused(403, "permission_error", f"uid {uid} is not a citizen") from exc
    # A citizen's primary group is `citizens` (citizen.admin.onboard); a member by a
    # supplementary group only (the baseline's owner, `experience`) is not one.
    if user.pw_gid != group.gr_gid:
        raise Refused(403, "permission_error", f"{user.pw_name} is not a citizen")
    if claimed and claimed != user.pw_name:
        raise Refused(403, "permission_error", f"{user.pw_name} cannot call for {claimed}")
    return known(user.pw_name)


def known(name: str, *, templates_too: bool = False) -> str:
    """`name` if a citizen of that name has a home here - or, `templates_too` (dev mode,
    before `citizen init`: `citizen ask`, `doctor`), one the templates define."""
    try:
        home = paths.citizen_home(name)
    except ConfigError as exc:
        raise Refused(400, "invalid_request_error", str(exc)) from exc
    if home.is_dir() or (templates_too and name in config.templates().citizen_names()):
        return name
    raise Refused(403, "permission_error", f"no citizen named {name}")
