"""Root's helper for the dashboard's actions: a person's approve or reject
(`citizen.admin.approvals`) and a person's presence in a ThoughtStream room
(`citizen.admin.presence`).

The web service runs as its own unprivileged user (`experience-web`), which writes
nothing on disk - not the root-owned decision a proposal trusts, not a room of the
commons. So it asks here: `experience-approve.socket` (systemd socket activation, one
short-lived root process per connection, `python -m citizen.admin.helper`). The helper
takes the caller only from the kernel (SO_PEERCRED must be the web user - a citizen's
user, whatever it sends, is refused) and requires the operator's web token in the
request; then it does what the CLI does, by the CLI's rules. Nothing in a request is an
instruction: ids, room names, reasons and the operator's name are data.

A request is one JSON line: {"action": "decide", "proposal", "approve", "why",
"operator", "token"} or {"action": "presence", "room", "present", "token"}; the answer
one JSON line, {"ok": true, ...} or {"ok": false, "error"}.
"""

from __future__ import annotations

import json
import logging
import pwd
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from citizen.admin import approvals, presence
from shared.errors import NotAllowed, SharedError
from shared.identity import peer_uid

log = logging.getLogger(__name__)
WEB_USER = "experience-web"  # the dashboard's system user (citizen-web.service)
SOCKET = Path("/run/experience-approve.sock")  # root's; group experience-web, 0660
MAX_REQUEST = 16_384  # bytes: an id, a reason of at most 2000 characters, a name


def _decide(req: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(req.get("proposal"), str) or not isinstance(req.get("approve"), bool) \
            or not isinstance(req.get("why"), str) or not isinstance(req.get("operator"), str):
        raise NotAllowed('a decision is {"action": "decide", "proposal", "approve", "why", '
                         '"operator", "token"}')
    d, note = approvals.decide(req["proposal"], req["approve"], req["why"],
                               approvals.clean_operator(req["operator"]))
    log.info("%s %s %s by %s", d.id, "approved" if req["approve"] else "rejected", d.phase,
             req["operator"])
    return {"proposal": d.id, "phase": d.phase, "note": note}


def _presence(req: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(req.get("room"), str) or not isinstance(req.get("present"), bool):
        raise NotAllowed('a presence is {"action": "presence", "room", "present", "token"}')
    temperature = presence.mark(req["room"], req["present"])
    return {"room": req["room"], "present": req["present"], "temperature": temperature}


ACTIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "decide": _decide, "presence": _presence}


def handle(conn: socket.socket, *, web_uid: int, token_path: Path | None = None) -> None:
    """Serve one request on `conn`: the caller must be `web_uid` by the kernel and carry
    the token; the answer is one JSON line, {"ok": ...}."""
    try:
        answer = {"ok": True, **_answer(conn, web_uid, token_path)}
    except (NotAllowed, SharedError, ValueError, OSError) as exc:
        answer = {"ok": False, "error": str(exc)}
    conn.sendall(json.dumps(answer).encode() + b"\n")


def _answer(conn: socket.socket, web_uid: int, token_path: Path | None) -> dict[str, Any]:
    # Read (bounded) before refusing, so a refused caller gets the reason, not a reset.
    line = _read_line(conn)
    uid = peer_uid(conn)
    if uid != web_uid:
        raise NotAllowed(f"uid {uid} is not the web service's user ({WEB_USER}); a person "
                         "acts with `sudo citizen ...` instead")
    req = json.loads(line)
    if not isinstance(req, dict) or req.get("action") not in ACTIONS \
            or not isinstance(req.get("token"), str):
        raise NotAllowed(f'a request is {{"action": one of {sorted(ACTIONS)}, "token", ...}}')
    approvals.check_token(req["token"], token_path)
    return ACTIONS[req["action"]](req)


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


def ask_root(request: dict[str, Any], *, sock: Path = SOCKET) -> dict[str, Any]:
    """The web service's side: one request to root's helper; its answer.

    :raises NotAllowed: the helper refused (its reason), or it cannot be reached.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        try:
            conn.connect(str(sock))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(_read_line(conn) or b"{}")
        except OSError as exc:
            raise NotAllowed(f"root's helper at {sock} does not answer ({exc}) - "
                             "`systemctl status experience-approve.socket`") from exc
    if not answer.get("ok"):
        raise NotAllowed(str(answer.get("error") or "root's helper refused"))
    return dict(answer)


def main() -> None:
    """systemd's Accept=yes service: the connection is our standard input."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s helper %(message)s")
    conn = socket.socket(fileno=0)
    try:
        handle(conn, web_uid=pwd.getpwnam(WEB_USER).pw_uid)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
