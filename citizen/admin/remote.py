"""The shared repositories' one remote, for a civilization on several servers (issue 46).

The baseline and the world are bare repositories (`baseline.git`, `world.git`) in one
directory of the remote's own user, served over git's smart HTTP: `git http-backend` run
as CGI by a threading HTTP server (`server`; `citizen remote serve`, whose unit is
systemd/experience-remote.service):

- **fetch** (git-upload-pack) needs no credential: the remote listens on the
  civilization's private network only - its servers' own addresses, never the internet
  (the unit's IPAddressAllow) - and what it serves is the code every citizen reads anyway.
- **push** (git-receive-pack: the `info/refs?service=git-receive-pack` probe and the
  POST) needs a broker's credential: HTTP basic auth, `NAME:TOKEN`, checked against the
  remote operator's pushers file (`NAME <sha256 of TOKEN>` a line, 0600, the remote's
  user) with hmac.compare_digest. Only brokers hold tokens; citizens fetch.
- each repository refuses a push that is not a fast-forward and the deletion of a branch
  (`receive.denyNonFastForwards`, `receive.denyDeletes`: in its config and on every call),
  so two servers' brokers racing for main cannot undo each other's merges.

A server finds its remote in the operator's `civilization.json` (`settings`): `{"remote":
"http://[fd7e:e1ab::1]:8418/", "remote_token": "/etc/experience/remote.token"}` (that token
path is the default). Its broker pushes (`citizen.broker.remote`); onboarding clones a
citizen's code from it (`baseline_source`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import parse_qs, urlsplit

from citizen.config import paths
from citizen.errors import CitizenError, ConfigError
from shared import door, gitsafe
from shared.atomic import write_bytes

log = logging.getLogger(__name__)

FILE = "civilization.json"  # the operator's, beside broker.json (citizen.broker.database)
TOKEN_FILE = "remote.token"  # noqa: S105 - the name of the broker's 0600 token file
REPOS = ("baseline", "world")
PORT = 8418
PUSHER_RE = re.compile(r"[a-z][a-z0-9-]{0,31}")  # a server's name (civilization.json)
_ROUTE = re.compile(r"/([a-z][a-z0-9_-]{0,63})\.git/(info/refs|git-upload-pack|git-receive-pack)")
_PROTOCOL = re.compile(r"version=[0-9]")  # the Git-Protocol header, passed on as GIT_PROTOCOL
SERVICES = ("git-upload-pack", "git-receive-pack")
MAX_BODY = 1 << 30  # a push of the whole baseline fits; an endless body does not
BACKEND_S = 600  # one request's git http-backend, at most
IDLE_S = 120  # a client that sends nothing for this long is dropped
_MAX_SECRET_FILE = 1 << 16


class RemoteError(CitizenError, RuntimeError):
    """The remote's files or settings cannot be used; the message names the fix."""


@dataclass(frozen=True)
class Settings:
    """Where this server's shared repositories live, and its broker's push credential."""

    url: str  # ends with "/": a repository is url + "<name>.git"
    token_file: Path

    def repository(self, name: str) -> str:
        return f"{self.url}{name}.git"


def settings(path: Path | None = None) -> Settings | None:
    """The operator's `civilization.json` "remote" key, or None: the repositories are this
    server's local directories, as on a server of its own.

    :raises ConfigError: the key is there and is not a usable URL (the message says why).
    """
    path = path or paths.operator_dir() / FILE
    try:
        raw = door.read_capped(path, _MAX_SECRET_FILE)  # door: the operator's /etc/experience
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(path, "", f"cannot be read ({exc})", "make it a plain file the "
                          "broker's user may read") from exc
    try:
        data: Any = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(path, "", f"is not JSON ({exc})",
                          'write {"remote": "http://<host>:8418/", …}') from exc
    if not isinstance(data, dict) or data.get("remote") is None:
        return None
    url, token = data["remote"], data.get("remote_token")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.query or parts.fragment:
        raise ConfigError(path, "remote", f"{url!r} is no http(s) URL of a remote",
                          'write "http://[fd7e:e1ab::1]:8418/" (the remote\'s address)')
    if parts.username is not None or parts.password is not None:
        raise ConfigError(path, "remote", "carries a user or password", "remove it: the "
                          f"push credential belongs in the token file ({TOKEN_FILE}) only")
    if token is not None and not (isinstance(token, str) and Path(token).is_absolute()):
        raise ConfigError(path, "remote_token", f"{token!r} is no absolute path",
                          f"name the broker's 0600 token file, or leave it out for {TOKEN_FILE}")
    return Settings(url.rstrip("/") + "/",
                    Path(token) if token else path.parent / TOKEN_FILE)


def baseline_source(local: Path) -> str:
    """What a citizen's code is cloned from: the remote's baseline when the operator names
    a remote, else the server's own baseline repository `local`."""
    found = settings()
    return found.repository("baseline") if found else str(local)


def read_private(path: Path, what: str) -> bytes:
    """A secret file of this process's user: a plain file it owns that nobody else may
    read (0600), so no citizen could have read it or put it there.

    :raises RemoteError: missing, a link, too loose or another user's (names the fix).
    """
    try:  # door: the operator's file, never a link, and this user's own
        data = door.read_capped(path, _MAX_SECRET_FILE, owner=os.geteuid())
        loose = path.lstat().st_mode & 0o077
    except OSError as exc:
        raise RemoteError(f"{what} {path} cannot be read as this user's own ({exc}) - make "
                          f"it with `citizen remote add-pusher`, owned by uid {os.geteuid()}, "
                          "0600") from exc
    if loose:
        raise RemoteError(f"{what} {path} may be read by others - chmod 600 {path}")
    return data


def token_hash(token: str) -> str:
    # 32 random bytes, not a password: a plain digest is as hard to reverse as guessing.
    return hashlib.sha256(token.encode()).hexdigest()


def pushers(path: Path) -> dict[str, str]:
    """The remote operator's pushers file: broker name -> the SHA-256 of its token."""
    found: dict[str, str] = {}
    for line in read_private(path, "the pushers file").decode(errors="replace").splitlines():
        fields = line.split()
        if len(fields) == 2 and PUSHER_RE.fullmatch(fields[0]) \
                and re.fullmatch(r"[0-9a-f]{64}", fields[1]):
            found[fields[0]] = fields[1]
        elif fields and not fields[0].startswith("#"):
            raise RemoteError(f"{path}: {line[:40]!r} is not `NAME SHA256` - remove the line "
                              "and add the pusher again (citizen remote add-pusher)")
    return found


def check_pusher(path: Path, name: str, token: str) -> bool:
    """Whether `name:token` is a pusher's credential (constant time in the token)."""
    known = pushers(path)
    matches = hmac.compare_digest(token_hash(token), known.get(name, "0" * 64))
    return matches and name in known


def add_pusher(path: Path, name: str, out: Path) -> None:
    """A new token for broker `name`: its digest appended to the pushers file `path`, the
    token itself written to `out` (`NAME:TOKEN`, 0600, made new) for the operator to
    install as that server's broker token file.

    :raises RemoteError: a bad name, a pusher of that name already, or `out` exists.
    """
    if not PUSHER_RE.fullmatch(name):
        raise RemoteError(f"{name!r} is no server name - lowercase letters, digits, dashes")
    known = pushers(path) if path.exists() else {}
    if name in known:
        raise RemoteError(f"{name} is already a pusher in {path} - remove its line first to "
                          "give it a new token")
    token = secrets.token_urlsafe(32)
    try:  # O_EXCL: a token is written once, never over a file someone placed there
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise RemoteError(f"cannot create {out} ({exc}) - name a new file") from exc
    with os.fdopen(fd, "w") as f:
        f.write(f"{name}:{token}\n")
    lines = [f"{n} {h}" for n, h in {**known, name: token_hash(token)}.items()]
    write_bytes(path, ("\n".join(lines) + "\n").encode(), mode=0o600)  # the remote's alone


# ------------------------------------------------------------ the remote's side

def prepare(root: Path) -> list[str]:
    """The bare repositories under `root`, each refusing non-fast-forward pushes and
    deletions; what was made or changed."""
    made, root = [], root.absolute()
    # 0700: the repositories are the remote's user's; everyone else reads through HTTP.
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in REPOS:
        repo = root / f"{name}.git"
        if not (repo / "HEAD").exists():
            gitsafe.run(None, "init", "--quiet", "--bare", "-b", "main", str(repo), cwd=root)
            made.append(f"{repo} (a bare repository)")
        for key, value in REPO_CONFIG:
            now = gitsafe.run(None, "config", "--file", str(repo / "config"), key,
                              cwd=root, check=False).stdout.decode().strip()
            if now != value:
                gitsafe.run(None, "config", "--file", str(repo / "config"), key, value, cwd=root)
                made.append(f"{repo}: {key}={value}")
    return made


REPO_CONFIG = (("receive.denyNonFastForwards", "true"),  # no server's push undoes another's
               ("receive.denyDeletes", "true"),  # nor deletes main
               ("receive.fsckObjects", "true"))  # a malformed object is refused at the door


def _backend_env(root: Path, pusher: str | None) -> dict[str, str]:
    pairs = [*REPO_CONFIG,  # again on every call: a repository config edited by hand lifts none
             ("core.hooksPath", "/dev/null"),  # a push is data: no hook runs on the remote
             ("http.getanyfile", "false"),  # smart HTTP only, no file served by name
             ("http.uploadpack", "true"),
             ("http.receivepack", "true" if pusher else "false")]  # pushers only
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root),
           "GIT_PROJECT_ROOT": str(root), "GIT_HTTP_EXPORT_ALL": "1",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_CONFIG_COUNT": str(len(pairs)), "GATEWAY_INTERFACE": "CGI/1.1"}
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    if pusher:
        env["REMOTE_USER"] = pusher
    return env


class Handler(BaseHTTPRequestHandler):
    """One request: a smart-HTTP call of git, or a refusal."""

    server: RemoteServer
    protocol_version = "HTTP/1.1"  # 100-continue for git's large POSTs; every reply closes
    timeout = IDLE_S

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        self.close_connection = True
        parts = urlsplit(self.path)
        found = _ROUTE.fullmatch(parts.path)
        if not found or not (self.server.root / f"{found[1]}.git" / "HEAD").is_file():
            self._refuse(404, "no such repository: the remote serves <name>.git over git's "
                         "smart HTTP only")
            return
        service = found[2]
        if service == "info/refs":
            asked = parse_qs(parts.query).get("service", [])
            service = asked[0] if len(asked) == 1 and asked[0] in SERVICES else ""
        if not service or method != ("GET" if found[2] == "info/refs" else "POST"):
            self._refuse(403, "only git's smart HTTP is served here")
            return
        pusher = None
        if service == "git-receive-pack":
            pusher = self._pusher()
            if pusher is None:
                return
        self._cgi(method, parts.path, parts.query, pusher)

    def _pusher(self) -> str | None:
        """The broker a push's basic auth names, or None (refused: 401 or 503 sent)."""
        scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
        try:
            name, _, token = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            name = token = ""
        try:
            ok = scheme.lower() == "basic" and check_pusher(self.server.pushers, name, token)
        except RemoteError as exc:
            log.error("push refused: %s", exc)
            self._refuse(503, "the remote cannot check credentials now (its log says why)")
            return None
        if not ok:
            log.warning("push refused from %s: no valid credential", self.client_address[0])
            self._refuse(401, "a push needs a broker's credential", auth=True)
            return None
        return name

    def _refuse(self, status: int, message: str, *, auth: bool = False) -> None:
        body = (message + "\n").encode()
        self.send_response(status)
        if auth:
            self.send_header("WWW-Authenticate", 'Basic realm="experience remote"')
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _cgi(self, method: str, path: str, query: str, pusher: str | None) -> None:
        env = {**_backend_env(self.server.root, pusher), "REQUEST_METHOD": method,
               "PATH_INFO": path, "QUERY_STRING": query, "SERVER_PROTOCOL": "HTTP/1.1",
               "REMOTE_ADDR": self.client_address[0],
               "CONTENT_TYPE": self.headers.get("Content-Type", "")}
        if self.headers.get("Content-Encoding"):  # git gzips large requests
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if _PROTOCOL.fullmatch(self.headers.get("Git-Protocol", "")):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        length = self.headers.get("Content-Length")
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        if length is not None and not chunked:
            if not length.isdigit() or int(length) > MAX_BODY:
                self._refuse(413, f"a request body is at most {MAX_BODY} bytes")
                return
            env["CONTENT_LENGTH"] = length  # without it (chunked) the backend reads to EOF
        proc = subprocess.Popen(["git", "http-backend"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, cwd=self.server.root)
        stdin, stdout = cast(IO[bytes], proc.stdin), cast(IO[bytes], proc.stdout)  # pipes
        killer = threading.Timer(BACKEND_S, proc.kill)
        killer.start()
        feeder = threading.Thread(target=self._feed, args=(
            stdin, int(length or 0) if not chunked else None), daemon=True)
        feeder.start()
        try:
            self._answer(stdout)
        finally:
            stdout.close()  # a backend still writing (the client went away) gets EPIPE
            proc.wait()  # the killer ends one that hangs
            killer.cancel()
            feeder.join(timeout=IDLE_S)

    def _answer(self, stdout: IO[bytes]) -> None:
        """The backend's CGI answer (headers, a blank line, the body) sent on as HTTP."""
        status, headers = 200, []
        for _ in range(64):
            line = stdout.readline(8192).rstrip(b"\r\n").decode("latin-1")
            if not line:
                break
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            else:
                headers.append((key, value.strip()))
        self.send_response(status if headers else 502)  # no answer at all: the backend died
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Connection", "close")  # the body runs to the end of the connection
        self.end_headers()
        shutil.copyfileobj(stdout, self.wfile)

    def _feed(self, sink: IO[bytes], length: int | None) -> None:
        """The request's body into the backend: `length` bytes, or (None) its chunks."""
        try:
            if length is None:
                total = 0
                while size := int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16):
                    total += size
                    if total > MAX_BODY:
                        return  # the backend sees a truncated request and fails
                    sink.write(self.rfile.read(size))
                    self.rfile.readline(8)
                while self.rfile.readline(1024).strip():  # trailers
                    pass
            else:
                while length > 0:
                    piece = self.rfile.read(min(length, 1 << 16))
                    if not piece:
                        return
                    sink.write(piece)
                    length -= len(piece)
        except (OSError, ValueError) as exc:  # the client or the backend went away
            log.info("request body not passed on: %s", exc)
        finally:
            try:
                sink.close()
            except OSError:
                log.info("git http-backend stopped reading the request body")

    def log_message(self, format: str, *args: Any) -> None:
        log.info("%s %s", self.client_address[0], format % args)


class RemoteServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], root: Path, pushers_file: Path) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.root, self.pushers = root, pushers_file
        super().__init__(address, Handler)


def server(root: Path, address: tuple[str, int], pushers_file: Path) -> RemoteServer:
    """The remote, bound and ready to `serve_forever` (its repositories prepared)."""
    for line in prepare(root):
        log.info("changed: %s", line)
    pushers(pushers_file)  # refuses to start with a file others may read
    return RemoteServer(address, root.absolute(), pushers_file)
