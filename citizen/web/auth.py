"""Who may see the dashboard: the operator's token, a signed session cookie, a CSRF value per
session, and the headers and redaction every response passes through.

The token is a file: on a server `/etc/experience/web.token` (root:experience-web 0640, made
by setup; the web process only reads it), in dev mode `$CIV_ROOT/.web/token` (0600, made here
on first use). Logging in (POST /login with the token) sets an HttpOnly, SameSite=Strict cookie
signed with a key derived from the token (hmac, stdlib: itsdangerous is not a dependency), so
a new token ends every session. Every request but /login and /static needs that cookie; every
POST other than /login also needs the session's CSRF value (the `csrf` form field or the
`X-CSRF-Token` header) - checked here, in one place, for every page module's routes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from citizen.config import paths
from citizen.config.secrets import MIN_SECRET, SECRET_KEYS, web_token_in
from citizen.errors import CitizenError
from shared.atomic import write_bytes
from shared.identity import server_mode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "civ_session"
SESSION_S = 12 * 3600  # a session lasts a working day; then the token is asked again
# All that is served without a session (no citizen data): the login form, the icon a
# browser fetches by itself (a 401 there is a console error on the login page), static files.
PUBLIC = ("/login", "/favicon.ico")
PUBLIC_PREFIX = "/static/"
TOKEN_BYTES = 32  # 256 bits: guessing is hopeless, so no lockout is needed
# Strict: scripts, styles, images and live updates from this origin only; no inline script
# or style (an injected <script> in a model's reply could not run even if it were unescaped),
# no framing (clickjacking the approve button), forms post only here.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with
    # the page's own forms, and the origin check below would refuse every one of them.
    # No other site is ever sent a Referer either way.
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),  # citizen data is never kept in a browser's or proxy's cache
]
_KEY_SHAPES = re.compile(rb"sk-ant-[A-Za-z0-9_\-]{8,}")  # an Anthropic key, wherever it came from
_WHY_LINE = ("# The operator's token for `citizen web` (dev mode): whoever holds it reads "
                  "every citizen's page and may approve; 0600, so only you can read it.\n")


class TokenMissing(CitizenError, FileNotFoundError):
    """The server's token file is not there (or not readable by this user)."""


def load_token() -> str:
    """The operator's token; in dev mode made on first use.

    :raises TokenMissing: on a server the file is missing or unreadable (setup makes it).
    """
    path = paths.web_token()
    server = server_mode(paths.shared_dir())
    try:
        text = path.read_text(encoding="utf-8")  # door: the operator's token, root's file
    except FileNotFoundError:
        if server:
            raise TokenMissing(f"{path} is missing - run setup again, which makes it "
                               "(root:experience-web 0640)") from None
        # 0700 directory, 0600 file: the token is the operator's alone in dev mode.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        write_bytes(path, (_WHY_LINE + token + "\n").encode(), mode=0o600)
        return token
    except PermissionError:
        raise TokenMissing(f"{path} is not readable by this user - run `citizen web` as the "
                           "experience-web user or as root") from None
    token = web_token_in(text)
    if not token:
        raise TokenMissing(f"{path} holds no token - delete it (dev mode makes a new one) "
                           "or run setup again")
    return token


@dataclass(frozen=True)
class Session:
    issued: float
    csrf: str


class Sessions:
    """Signs and checks session cookies with a key derived from the token."""

    def __init__(self, token: str) -> None:
        self.token = token
        self._key = hmac.new(token.encode(), b"experience-web session v1", hashlib.sha256).digest()

    def token_ok(self, offered: str) -> bool:
        """Constant time: how much of a wrong token matched must not show in the timing."""
        return hmac.compare_digest(offered.strip().encode(), self.token.encode())

    def new(self) -> tuple[Session, str]:
        """A fresh session and its cookie value."""
        session = Session(time.time(), secrets.token_urlsafe(24))
        body = base64.urlsafe_b64encode(json.dumps(
            {"iat": session.issued, "csrf": session.csrf}).encode())
        return session, f"{body.decode()}.{self._sign(body)}"

    def read(self, cookie: str | None) -> Session | None:
        """The session of a cookie; None when missing, forged, or expired."""
        if not cookie or "." not in cookie:
            return None
        body, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._sign(body.encode()).encode()):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(body.encode()))
            session = Session(float(data["iat"]), str(data["csrf"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if 0 <= time.time() - session.issued < SESSION_S else None

    def _sign(self, body: bytes) -> str:
        return hmac.new(self._key, body, hashlib.sha256).hexdigest()


def redact(body: bytes, known: list[bytes]) -> bytes:
    """`body` with anything shaped like a key, and every secret value this process knows,
    replaced. The pages read no secret; this guards anyway."""
    body = _KEY_SHAPES.sub(b"[redacted]", body)
    for value in known:
        body = body.replace(value, b"[redacted]")
    return body


def known_secrets(token: str) -> list[bytes]:
    """The secret values this process could leak: its own token, and any key in its
    environment (the web service should hold none)."""
    values = [token, *(os.environ.get(k, "") for k in SECRET_KEYS)]
    return [v.encode() for v in values if len(v) >= MIN_SECRET]


def cookie_header(value: str, secure: bool, max_age: int = SESSION_S) -> str:
    """Set-Cookie for the session. Secure only over https: on the loopback http port an SSH
    tunnel reaches, a Secure cookie would not be sent back by every browser, and the
    tunnel is already the encryption."""
    return (f"{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else ""))


def _cookie(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            for part in bytes(value).decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                if key == COOKIE:
                    return str(val)
    return None


def header(scope: Scope, wanted: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == wanted), "")


class Guard:
    """ASGI middleware: the session gate, the CSRF check of every POST, the security
    headers and the redaction pass of every response."""

    def __init__(self, app: ASGIApp, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions
        self.known = known_secrets(sessions.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        public = path in PUBLIC or path.startswith(PUBLIC_PREFIX)
        session = self.sessions.read(_cookie(scope))
        scope.setdefault("state", {})["session"] = session
        send = self._guarded(send)
        if not public and session is None:
            await _refuse(scope, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            origin = header(scope, b"origin")
            if origin and origin.split("://", 1)[-1] != header(scope, b"host"):
                await plain(send, 403, "refused: this form was not sent from this page")
                return
            if not public:
                body = await _body(receive)
                if session is None or not _csrf_ok(scope, body, session.csrf):
                    await plain(send, 403, "refused: the page's CSRF value is missing or "
                                 "wrong - reload the page and try again")
                    return
                receive = _replay(body)
        await self.app(scope, receive, send)

    def _guarded(self, send: Send) -> Send:
        """`send` with the headers added and the body redacted. A page is buffered whole
        (its Content-Length then fits the redacted body); an event stream chunk by chunk."""
        state: dict[str, Any] = {"start": None, "chunks": []}

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in {h for h, _ in HEADERS}]
                message["headers"] = headers + HEADERS
                state["stream"] = any(k.lower() == b"content-type"
                                      and v.startswith(b"text/event-stream")
                                      for k, v in headers)
                if state["stream"]:
                    await send(message)
                else:
                    state["start"] = message
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            if state["stream"]:
                message["body"] = redact(message.get("body", b""), self.known)
                await send(message)
                return
            state["chunks"].append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = redact(b"".join(state["chunks"]), self.known)
            start = state["start"]
            start["headers"] = [(k, v) for k, v in start["headers"]
                                if k.lower() != b"content-length"]
            start["headers"].append((b"content-length", str(len(body)).encode()))
            await send(start)
            await send({"type": "http.response.body", "body": body})

        return wrapped


def _csrf_ok(scope: Scope, body: bytes, expected: str) -> bool:
    offered = header(scope, b"x-csrf-token")
    if not offered and header(scope, b"content-type").startswith(
            "application/x-www-form-urlencoded"):
        offered = (parse_qs(body.decode("utf-8", "replace")).get("csrf") or [""])[0]
    return bool(offered) and hmac.compare_digest(offered.encode(), expected.encode())


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """A `receive` that hands the app the body the guard already read."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _refuse(scope: Scope, send: Send) -> None:
    """No session: a browser asking for a page goes to /login; anything else gets 401."""
    if scope["method"] == "GET" and "text/html" in header(scope, b"accept"):
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", b"/login"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    await plain(send, 401, "log in first: open /login with the token `citizen web --token` "
                 "prints")


async def plain(send: Send, status: int, text: str, *, close: bool = False) -> None:
    """A plain-text answer; `close`: the connection is closed after it (a refused body
    is then never read)."""
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
