"""The daemon's side of the broker: a connection, and in dev mode a broker to talk to.

The real Anthropic SDK stays as it is; only its HTTP client changes, to an httpx
transport over the broker's Unix socket. The key the SDK is given is a placeholder:
the broker drops it and adds the operator's.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from citizen import config
from citizen.config import paths, secrets
from citizen.errors import ProviderUnavailable
from shared.atomic import CorruptFile, read_json, write_json
from shared.locks import locked

if TYPE_CHECKING:
    import httpx2

BASE_URL = "http://broker"  # never resolved: the transport is the socket (and see describe)
PLACEHOLDER_KEY = "held-by-the-broker"
CITIZEN_HEADER = "X-Experience-Citizen"
DEV_IDLE_EXIT_S = 600.0  # a dev-mode broker nobody calls for 10 minutes goes away
# A model call's read timeout, past the broker's upstream one (broker/upstream.py
# READ_TIMEOUT_S): the broker answers first, so no attempt it bills is abandoned unlogged.
CALL_TIMEOUT_S = 660.0
START_TIMEOUT_S = 20.0  # also how long a stopped dev-mode broker may take to go
STARTED = "broker.started.json"  # a dev-mode broker's record: its pid, what it follows


def reachable(path: Path) -> bool:
    """A broker accepts connections at `path`."""
    return _listener(path) is not None


def connect(path: Path, timeout_s: float) -> socket.socket:
    """A blocking connection to the socket at `path`, waiting up to `timeout_s` for room
    in its backlog. Why not `settimeout`: it makes the socket non-blocking, and a
    non-blocking connect to a Unix socket whose backlog is full fails at once (EAGAIN) -
    a thousand daemons asking for their wake permits in one moment found the broker
    "gone". A send timeout bounds the blocking connect's wait instead.

    :raises OSError: nothing listens there, or no room came within `timeout_s`.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    whole = int(timeout_s)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                    struct.pack("ll", whole, int((timeout_s - whole) * 1e6)))
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def _listener(path: Path) -> int | None:
    """The pid of the process listening at `path` (the kernel's SO_PEERCRED, never a
    pid file), or None when nothing accepts there."""
    try:
        s = connect(path, 2.0)  # a broker too busy to take one in 2 s is treated as gone
    except OSError:
        return None
    with s:
        creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[0])


def started_with() -> dict[str, str]:
    """What a dev-mode broker takes from the environment it starts in and then serves
    every citizen with (`secrets.BROKER_ENV_KEYS`): the upstream in the clear, all of it
    as a fingerprint - so the record shows where calls go and holds no key."""
    env = {k: os.environ.get(k, "") for k in secrets.BROKER_ENV_KEYS}
    digest = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]
    return {"upstream": env["ANTHROPIC_BASE_URL"], "fingerprint": digest}


def record_start(state: Path) -> None:
    """A dev-mode broker, holding its ledger's lock, records its pid and what it follows
    (before it listens, so whoever reaches it finds its record)."""
    # 0600: the developer's, like the state directory around it.
    write_json(state / STARTED, {"pid": os.getpid(), **started_with()}, mode=0o600)


def ensure() -> Path:
    """The socket of a running broker; in dev mode one is started if none runs, and one
    started from another environment is replaced.

    Why replace rather than ask: a dev-mode broker reads the upstream and keys from the
    environment it was started in (as every dev-mode process reads secrets), and one
    running for its idle minutes kept serving a previous ANTHROPIC_BASE_URL to a caller
    that set a new one. Passing the caller's upstream per request would let any request
    name where the key goes; restarting keeps "the broker's environment" the only
    source, now always the asker's. Never on a server: there the broker's upstream is the
    operator's, whatever a citizen's environment says.

    :raises ProviderUnavailable: none runs on a server (systemd starts it), or the
        dev-mode broker did not come up (or an old one would not stop).
    """
    path = paths.broker_socket()
    if config.server_mode():
        if reachable(path):
            return path
        raise ProviderUnavailable(
            f"the broker is not answering at {path} - on a server: systemctl start "
            "experience-broker (journalctl -u experience-broker says why it stopped)")
    state = paths.broker_state()
    if _serving(path, state)[1]:
        return path
    state.mkdir(mode=0o700, parents=True, exist_ok=True)  # the developer's alone
    with locked(state / "start"):  # one starter at a time; the others find it running
        pid, ours = _serving(path, state)
        if ours:
            return path
        if pid is not None:
            _stop(path, pid)
        return _start(path, state)


def _serving(path: Path, state: Path) -> tuple[int | None, bool]:
    """The pid of the broker at `path` (None: none answers), and whether it was started
    from this process's environment (or is this very process)."""
    pid = _listener(path)
    if pid is None or pid == os.getpid():
        return pid, pid is not None
    try:
        record = read_json(state / STARTED)
    except (OSError, CorruptFile):
        record = None  # a broker of older code: it records nothing
    ours = isinstance(record, dict) and record.get("pid") == pid \
        and record.get("fingerprint") == started_with()["fingerprint"]
    return pid, ours


def _stop(path: Path, pid: int) -> None:
    """SIGTERM the dev-mode broker `pid` and wait until it no longer listens at `path`.
    A call it was serving for a process of the old environment fails and is retried,
    or fails as a broker error naming the cause: the developer changed the environment."""
    with contextlib.suppress(ProcessLookupError):  # gone already: nothing to wait for
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + START_TIMEOUT_S
    while _alive(pid):  # gone, not just closed: its ledger's lock is free for the next
        if time.monotonic() > deadline:
            raise ProviderUnavailable(
                f"the dev-mode broker (pid {pid}) serving {path} was started from another "
                f"environment and did not stop - kill {pid}, then try again")
        time.sleep(0.02)  # polling a process about to exit


def _alive(pid: int) -> bool:
    """Some thread of `pid` runs. Why every thread: a killed process's leader is a zombie
    while its other threads still exit, and until the last is gone its socket still
    listens and its ledger's lock is held (a broker started then found both taken)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            stat = (task / "stat").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"]):
            return True
    return False


def _start(path: Path, state: Path) -> Path:
    """A broker as a child of this `citizen`, in its own session (it outlives one wake
    and serves every daemon of this civilization), logging beside its ledger."""
    env = {**os.environ, "CIV_ROOT": str(paths.civ_root()),
           "PYTHONPATH": str(paths.project_dir())}
    with (state / "broker.log").open("ab") as logfile:
        proc = subprocess.Popen(
            [sys.executable, "-m", "citizen", "broker", "run",
             "--idle-exit", str(DEV_IDLE_EXIT_S)],
            env=env, stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT,
            start_new_session=True)
    (state / "broker.pid").write_text(f"{proc.pid}\n", encoding="utf-8")  # for `kill`
    deadline = time.monotonic() + START_TIMEOUT_S
    while _listener(path) != proc.pid:  # this broker, not one still going away there
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (state / "broker.log").read_text(errors="replace")[-800:]
            raise ProviderUnavailable(f"the dev-mode broker did not start ({tail.strip()})")
        time.sleep(0.02)  # polling the socket the child is about to bind
    return path


def http_client(citizen: str, timeout_s: float = 600.0) -> httpx2.Client:
    """An httpx client whose every request goes to the broker, naming `citizen` (which
    counts only where the broker cannot tell from the kernel: root, dev mode)."""
    import httpx2 as httpx  # noqa: PLC0415 - the SDK's own dependency; only a model call needs it

    transport = httpx.HTTPTransport(uds=str(ensure()))
    return httpx.Client(transport=transport, base_url=BASE_URL, timeout=timeout_s,
                        headers={CITIZEN_HEADER: citizen})


def whoami(citizen: str) -> dict[str, Any]:
    """What the broker says of `citizen`: provider, models, caps, spent today.

    :raises ProviderUnavailable: no broker answers, or it refused.
    """
    import httpx2 as httpx  # noqa: PLC0415 - lazy, as above

    try:
        with http_client(citizen, timeout_s=10.0) as client:
            resp = client.get("/v1/experience/whoami")
    except httpx.HTTPError as exc:
        raise ProviderUnavailable(f"the broker did not answer ({exc})") from exc
    try:
        data = resp.json()
    except json.JSONDecodeError:
        data = {}
    if resp.status_code != 200:
        message = (data.get("error") or {}).get("message") if isinstance(data, dict) else None
        raise ProviderUnavailable(f"the broker refused: {message or resp.status_code}")
    return dict(data)


def civilization_spent(citizen: str) -> float | None:
    """The civilization's dollars spent or reserved today, as the broker's ledger (the
    authority) has them, if a broker answers at its socket now; None otherwise - none is
    started for this (a wake's first cap check then sums its peers' ledgers).

    Plain HTTP/1.1 on the socket (http.client): an httpx client builds a TLS context
    first, 59 ms of this call's 60."""
    try:
        sock = connect(paths.broker_socket(), 2.0)
    except OSError:
        return None
    try:
        with sock:
            sock.settimeout(5.0)
            sock.sendall(f"GET /v1/experience/whoami HTTP/1.1\r\nHost: broker\r\n"
                         f"{CITIZEN_HEADER}: {citizen}\r\nConnection: close\r\n\r\n".encode())
            answer = http.client.HTTPResponse(sock)
            answer.begin()
            data = json.loads(answer.read(64 * 1024)) if answer.status == 200 else {}
        value = data.get("civilization_spent_today_usd") if isinstance(data, dict) else None
    except (OSError, http.client.HTTPException, ValueError):  # gone, or not a broker's answer
        return None
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def request(citizen: str, method: str, path: str, payload: Any = None,
            timeout_s: float = 60.0) -> tuple[int, Any]:
    """One JSON request to a broker route (`citizen.broker.server.route`): (status, answer).

    :raises ProviderUnavailable: no broker answers.
    """
    import httpx2 as httpx  # noqa: PLC0415 - lazy, as above

    try:
        with http_client(citizen, timeout_s=timeout_s) as client:
            resp = client.request(method, path, json=payload)
    except httpx.HTTPError as exc:
        raise ProviderUnavailable(f"the broker did not answer ({exc})") from exc
    return _answer(resp)


def view(path: str, params: dict[str, int] | None = None,
         timeout_s: float = 10.0) -> tuple[int, Any]:
    """A GET of one of the broker's read-only views (`citizen.broker.views`): (status,
    answer). No citizen is named - the broker serves these by the caller's uid alone -
    and no broker is started (a server's is systemd's; dev mode reads its own files).

    :raises ProviderUnavailable: no broker answers.
    """
    import httpx2 as httpx  # noqa: PLC0415 - lazy, as above

    sock = paths.broker_socket()
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url=BASE_URL,
                          timeout=timeout_s) as client:
            resp = client.get(path, params=params)
    except httpx.HTTPError as exc:
        raise ProviderUnavailable(f"the broker did not answer at {sock} ({exc})") from exc
    return _answer(resp)


def _answer(resp: httpx2.Response) -> tuple[int, Any]:
    try:
        return resp.status_code, resp.json()
    except json.JSONDecodeError:
        return resp.status_code, {"error": {"message": resp.text[:300]}}
