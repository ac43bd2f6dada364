"""What every request must be before any route runs: addressed to a name this dashboard
serves (the Host header), and no bigger than a form of it (the body).

- **Host.** A page on another site can make the operator's browser resolve its own name
  to 127.0.0.1 (DNS rebinding) and then read the dashboard as "its" origin; the browser
  still sends that name as the Host. So only these names are served: the address the
  request arrived on (uvicorn's `server`, e.g. 127.0.0.1 of `--listen 127.0.0.1:8765`),
  `localhost`, `127.0.0.1`, `::1`, and those the operator lists in `EXPERIENCE_WEB_HOSTS`
  (comma-separated, set in a drop-in: `systemctl edit citizen-web`, then
  `Environment=EXPERIENCE_WEB_HOSTS=dash.example.org`). Any other is refused with 421 (no
  Host at all: 400). The port is not compared: an SSH tunnel may arrive on another one.
- **Body.** uvicorn reads whatever body a client announces; the dashboard's largest form
  is a decision with its reason. A body announced (Content-Length) past MAX_BODY is
  refused with 413 before a byte of it is read, and a chunked one as soon as what was
  read passes it - then the connection is closed, so the rest is never read either.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from citizen.web.auth import ASGIApp, Message, Receive, Scope, Send, header, plain

# 64 KiB: the biggest form (approve or reject with a person's reason) is a few KB; a
# body past this is no form of ours, and reading it would be a citizen's memory budget.
MAX_BODY = 64 * 1024
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
HOSTS_ENV = "EXPERIENCE_WEB_HOSTS"


def operator_hosts() -> frozenset[str]:
    """The names the operator lets the dashboard answer to beside the local ones."""
    raw = os.environ.get(HOSTS_ENV, "")
    return frozenset(n for n in (hostname(p) for p in raw.replace(" ", ",").split(",")) if n)


def hostname(host: str) -> str:
    """The name of a Host header value: no port, no IPv6 brackets, lower case, no final dot."""
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8765
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        host = host.partition(":")[0]
    return host.rstrip(".")


class Limits:
    """ASGI middleware, outermost: the Host check, then the body limit (see the module)."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str] = (), max_body: int = MAX_BODY
                 ) -> None:
        self.app = app
        self.hosts = frozenset(LOCAL_NAMES) | {hostname(h) for h in hosts}
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # no route speaks it; the name is checked anyway
            if not self._served(scope):
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        host = header(scope, b"host")
        if not host:
            await plain(send, 400, "refused: no Host header - open the dashboard by its "
                        "address, e.g. http://127.0.0.1:8765/", close=True)
            return
        if not self._served(scope):
            await plain(send, 421, f"refused: this dashboard does not answer to "
                        f"{hostname(host)!r} - open it as http://127.0.0.1:8765/ (through "
                        f"an SSH tunnel), or have the operator add the name to {HOSTS_ENV} "
                        "in a drop-in for citizen-web.service", close=True)
            return
        announced = header(scope, b"content-length")
        if announced and (not announced.isdigit() or int(announced) > self.max_body):
            await plain(send, 413, self._too_large(), close=True)
            return
        await self._bounded(scope, receive, send)

    def _served(self, scope: Scope) -> bool:
        name = hostname(header(scope, b"host"))
        server = scope.get("server")
        here = {hostname(str(server[0]))} if server else set()  # the address it came in on
        return name in self.hosts or name in here

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        read = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal read, refused
            message = await receive()
            read += len(message.get("body", b""))
            if read > self.max_body and not refused:  # a chunked body announces no length
                refused = True
                if not started:
                    await plain(send, 413, self._too_large(), close=True)
            # Past the limit the app hears that the client left: it reads no more.
            return {"type": "http.disconnect"} if refused else message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:  # answered already: whatever the app says after is dropped
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except Exception:
            if not refused:
                raise
            # The app failed on the "disconnect" it was handed (Starlette raises
            # ClientDisconnect): the 413 is the answer, the failure is ours to drop.

    def _too_large(self) -> str:
        return (f"refused: the body is over {self.max_body} bytes - no form of the dashboard "
                "is that big; send the form from its page")
