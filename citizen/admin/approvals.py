"""A person's decision on a proposal: one path for `citizen proposal approve|reject` and
the dashboard's buttons.

`decide` records it (shared.consensus: only a plain file of root's counts on a server) and
rings whoever owes the next step. The CLI runs it as root. The web service runs as its
own unprivileged user (`experience-web`), which can write no root-owned file, so on a
server it asks root's helper (`citizen.admin.helper`), which checks who calls and the
operator's token, then calls `decide` by the same rules as the CLI.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path
from typing import TYPE_CHECKING

from citizen import civilization, config
from citizen.config import paths
from citizen.config.secrets import web_token_in
from shared.errors import NotAllowed

if TYPE_CHECKING:  # a type only: every CLI command imports this module (cli/options.py)
    from shared.consensus import Proposal

MAX_OPERATOR = 64


def decide(pid: str, approve: bool, why: str, operator: str) -> tuple[Proposal, str]:
    """Record `operator`'s decision on proposal `pid`; the proposal and what was rung.

    :raises NotAllowed: nothing to approve, already decided or run, or a rejection
        without a reason.
    :raises Invalid: no such proposal.
    """
    if not approve and not why.strip():
        raise NotAllowed(f"rejecting {pid} needs a reason (--why): the citizens learn "
                         "from it")
    tpl = config.templates()
    d = civilization.consensus(tpl).decide_human(pid, operator,
                                                 "approve" if approve else "reject", why)
    return d, ring_next(d)


def ring_next(d: Proposal) -> str:
    """Ring whoever owes proposal `d`'s next step (as the operator); says so."""
    who = d.owed_by
    if who in ("", "operator"):
        return ""
    if not ring(who, "CONSENSUS", f"{d.phase} of {d.id}"):
        return f"; could not ring {who}'s doorbell - its next scheduled wake takes it"
    return f"; rang {who}'s doorbell ({d.phase})"


def ring(name: str, wake_type: str, reason: str) -> bool:
    """Ring citizen `name`'s doorbell from the operator's side; whether it rang."""
    home = paths.home(name)
    # Root (the operator with sudo, or the helper) rings on the citizen's behalf: the
    # citizen owns the file.
    owner = (home.dir.stat().st_uid, home.dir.stat().st_gid) if os.geteuid() == 0 else None
    return civilization.commons().ring(name, wake_type, reason, sender="operator", owner=owner)


def check_token(token: str, path: Path | None = None) -> None:
    """:raises NotAllowed: `token` is not the operator's web token (or there is none)."""
    path = path or paths.web_token()
    try:
        text = path.read_text(encoding="utf-8")  # door: the operator's token, root's file
    except OSError as exc:
        raise NotAllowed(f"no web token at {path} ({exc.strerror}) - make one with "
                         "`citizen web --token`") from exc
    expected = web_token_in(text)
    # compare_digest: the time taken says nothing about how much of a guess was right.
    if not expected or not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise NotAllowed("the operator's web token is wrong or missing - nothing was "
                         "recorded; log in again with the token `citizen web --token` prints")


def clean_operator(name: str) -> str:
    """The operator's name as recorded: printable, short (it is shown in terminals)."""
    text = "".join(ch for ch in name if ch.isprintable())[:MAX_OPERATOR].strip()
    if not text:
        raise NotAllowed("name the operator who decides")
    return text
