"""A person's decision on a proposal: one path for `citizen proposal approve|reject` and
the dashboard's buttons.

`decide` records it (shared.consensus: only a plain file of root's counts on a server) and
rings whoever owes the next step. The CLI runs it as root. The web service runs as its
own unprivileged user (`experience-web`), which can write no root-owned file, so on a
server it asks root's helper instead: `experience-approve.socket` (systemd socket
activation, one root process per connection, `python -m citizen.admin.approvals`). The
helper takes the caller only from the kernel (SO_PEERCRED must be the web user - a
citizen's user, whatever it sends, is refused) and requires the operator's web token in
the request; then it calls `decide` by the same rules as the CLI. Nothing in a request is
an instruction: the proposal id, the reason and the operator's name are data.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import pwd
import socket
from pathlib import Path
from typing import Any

from citizen import civilization, config
from citizen.config import paths
from citizen.config.secrets import web_token_in
from shared.consensus import Proposal
from shared.errors import NotAllowed, SharedError
from shared.identity import peer_uid

log = logging.getLogger(__name__)
WEB_USER = "experience-web"  # the dashboard's system user (citizen-web.service)
SOCKET = Path("/run/experience-approve.sock")  # root's; group experience-web, 0660
MAX_REQUEST = 16_384  # bytes: an id, a reason of at most 2000 characters, a name
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
        text = path.read_text(encoding="utf-8")
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


# ---------------------------------------------------------------- root's helper

def handle(conn: socket.socket, *, web_uid: int, token_path: Path | None = None) -> None:
    """Serve one request on `conn` (root's helper): the caller must be `web_uid` by the
    kernel and carry the token; the answer is one JSON line, {"ok": ...}."""
    try:
        answer = _answer(conn, web_uid, token_path)
    except (NotAllowed, SharedError, ValueError, OSError) as exc:
        answer = {"ok": False, "error": str(exc)}
    conn.sendall(json.dumps(answer).encode() + b"\n")


def _answer(conn: socket.socket, web_uid: int, token_path: Path | None) -> dict[str, Any]:
    # Read (bounded) before refusing, so a refused caller gets the reason, not a reset.
    line = _read_line(conn)
    uid = peer_uid(conn)
    if uid != web_uid:
        raise NotAllowed(f"uid {uid} is not the web service's user ({WEB_USER}); a person "
                         "decides with `sudo citizen proposal approve|reject`")
    req = json.loads(line)
    if not isinstance(req, dict) or not isinstance(req.get("proposal"), str) \
            or not isinstance(req.get("approve"), bool) or not isinstance(req.get("why"), str) \
            or not isinstance(req.get("operator"), str) or not isinstance(req.get("token"), str):
        raise NotAllowed('a request is {"proposal", "approve", "why", "operator", "token"}')
    check_token(req["token"], token_path)
    d, note = decide(req["proposal"], req["approve"], req["why"],
                     clean_operator(req["operator"]))
    return {"ok": True, "proposal": d.id, "phase": d.phase, "note": note}


def _read_line(conn: socket.socket) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST:
            raise NotAllowed(f"a request is at most {MAX_REQUEST} bytes")
    return buf.split(b"\n", 1)[0]


def ask_root(pid: str, approve: bool, why: str, operator: str, token: str, *,
             sock: Path = SOCKET) -> dict[str, Any]:
    """The web service's side: ask root's helper to record the decision.

    :raises NotAllowed: the helper refused (its reason), or it cannot be reached.
    """
    request = {"proposal": pid, "approve": approve, "why": why, "operator": operator,
               "token": token}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        try:
            conn.connect(str(sock))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(_read_line(conn) or b"{}")
        except OSError as exc:
            raise NotAllowed(f"root's approval helper at {sock} does not answer ({exc}) - "
                             "`systemctl status experience-approve.socket`") from exc
    if not answer.get("ok"):
        raise NotAllowed(str(answer.get("error") or "root's approval helper refused"))
    return dict(answer)


def main() -> None:
    """systemd's Accept=yes service: the connection is our standard input."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s approve %(message)s")
    conn = socket.socket(fileno=0)
    try:
        handle(conn, web_uid=pwd.getpwnam(WEB_USER).pw_uid)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
