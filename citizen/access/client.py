"""The daemon's side of the broker: a connection, and in dev mode a broker to talk to.

The real Anthropic SDK stays as it is; only its HTTP client changes, to an httpx
transport over the broker's Unix socket. The key the SDK is given is a placeholder:
the broker drops it and adds the operator's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from citizen import config
from citizen.config import paths
from citizen.errors import ProviderUnavailable
from shared.locks import locked

if TYPE_CHECKING:
    import httpx2

BASE_URL = "http://broker"  # never resolved: the transport is the socket (and see describe)
PLACEHOLDER_KEY = "held-by-the-broker"
CITIZEN_HEADER = "X-Experience-Citizen"
DEV_IDLE_EXIT_S = 600.0  # a dev-mode broker nobody calls for 10 minutes goes away
START_TIMEOUT_S = 20.0


def reachable(path: Path) -> bool:
    """A broker accepts connections at `path`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def ensure() -> Path:
    """The socket of a running broker; in dev mode one is started if none runs.

    :raises ProviderUnavailable: none runs on a server (systemd starts it), or the
        dev-mode broker did not come up.
    """
    path = paths.broker_socket()
    if reachable(path):
        return path
    if config.server_mode():
        raise ProviderUnavailable(
            f"the broker is not answering at {path} - on a server: systemctl start "
            "experience-broker (journalctl -u experience-broker says why it stopped)")
    state = paths.broker_state()
    state.mkdir(mode=0o700, parents=True, exist_ok=True)  # the developer's alone
    with locked(state / "start"):  # one starter at a time; the others find it running
        if reachable(path):
            return path
        return _start(path, state)


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
    while not reachable(path):
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
