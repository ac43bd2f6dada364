"""A wake permit from the broker (`citizen.broker.permits`): asked on a connection of its
own, held while that connection stays open, given back by closing it.

The daemon asks after its gate says "work" and before it starts the wake process
(`citizen.daemon.turn`), and its wake process inherits it (HELD_ENV: the broker keys a
permit by citizen, so the daemon's covers its child). A citizen's process that calls a
model with no daemon's permit - `citizen wake` by hand, a memory roll-up, a tool - takes
one for the rest of its life on a server (`for_this_process`), where the broker refuses
a model call without one. A plain socket, not httpx: the daemon imports no HTTP client,
and its wait must end at once on a SIGTERM (`Cancel`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from citizen import config
from citizen.access import client
from citizen.config import paths
from citizen.errors import CitizenError, ProviderUnavailable

log = logging.getLogger(__name__)

PATH = "/v1/experience/permit"
VIEW = "/v1/experience/views/permits"
# In a wake process's environment: its parent holds the permit (the citizen's, so this
# process is covered too). Forging it gains nothing: the broker asks its own table.
HELD_ENV = "CITIZEN_WAKE_PERMIT"
CONNECT_S = 10.0  # a broker that does not take the request in this long is treated as gone
MAX_HEAD = 65536  # the broker's answer before its lines (a refusal's body included)
MAX_VIEW = 4 << 20  # the view: a line per citizen holding or waiting


class PermitUnavailable(ProviderUnavailable):
    """No permit: no broker answers, it refused, or it ended the wait (the message says
    which and what to do)."""


class Cancelled(CitizenError):
    """The wait was given up (`Cancel.set`): the daemon stops."""


class Cancel:
    """Ends the waits for a permit at once, from another thread or a signal handler:
    each wait polls a socket pair of its own beside the broker's connection, and `set`
    writes a byte to each (no lock: a handler on the waiting thread must not wait)."""

    def __init__(self) -> None:
        self.is_set = False
        self._wakers: set[socket.socket] = set()

    def set(self) -> None:
        self.is_set = True
        for waker in list(self._wakers):
            with contextlib.suppress(OSError):  # its wait just ended and closed it
                waker.send(b"!")

    def wait(self, timeout_s: float) -> bool:
        """Sleep `timeout_s` unless `set` comes first; whether it came."""
        with self.watched() as wake:
            poller = select.poll()
            poller.register(wake, select.POLLIN)
            return bool(poller.poll(int(timeout_s * 1000)))

    @contextlib.contextmanager
    def watched(self) -> Iterator[socket.socket]:
        """A socket that becomes readable when `set` is called (already, if it was)."""
        ours, theirs = socket.socketpair()
        self._wakers.add(theirs)
        try:
            if self.is_set:
                theirs.send(b"!")
            yield ours
        finally:
            self._wakers.discard(theirs)
            ours.close()
            theirs.close()


class Permit:
    """Citizen's request for a permit, then the permit while it is held."""

    def __init__(self, citizen: str) -> None:
        self.citizen = citizen
        self.lease_s = 0.0
        self._sock: socket.socket | None = None
        self._buf = b""
        self._released = False
        self._watcher: threading.Thread | None = None

    def wait(self, cancel: Cancel | None = None,
             said: Callable[[int], None] | None = None) -> Permit:
        """Ask, and wait until the permit is granted; `said(n)` whenever the place moves
        (n ahead in the queue). Waiting costs this thread, blocked.

        :raises PermitUnavailable: no broker, a refusal, or the connection ended.
        :raises Cancelled: `cancel` was set meanwhile.
        """
        path = client.ensure()
        try:
            sock = client.connect(path, CONNECT_S)
        except OSError as exc:
            raise PermitUnavailable(f"the broker at {path} did not take a wake permit's "
                                    f"request ({exc})") from exc
        try:
            sock.sendall(f"POST {PATH} HTTP/1.1\r\nHost: broker\r\n{client.CITIZEN_HEADER}: "
                         f"{self.citizen}\r\nContent-Length: 0\r\n\r\n".encode())
            with cancel.watched() if cancel else contextlib.nullcontext(None) as wake:
                self._head(sock, wake)
                while (line := self._line(sock, wake)) is not None:
                    if line.get("state") == "waiting" and said is not None:
                        said(int(line.get("ahead", 0)))
                    elif line.get("state") == "granted":
                        self.lease_s = float(line.get("lease_s", 0.0))
                        self._sock = sock
                        return self
                raise PermitUnavailable(f"the broker at {path} ended the wait for a wake "
                                        "permit (restarted or stopped)")
        except OSError as exc:
            sock.close()
            raise PermitUnavailable(f"the broker at {path} did not answer a wake permit's "
                                    f"request ({exc})") from exc
        except BaseException:
            sock.close()
            raise

    def watch(self, lost: Callable[[str], None]) -> None:
        """Call `lost(why)` from a thread of its own if the permit ends before `release`
        (its lease ran out, or the broker went away)."""
        sock = self._sock
        if sock is None:
            raise ValueError("no permit is held")

        def run() -> None:
            why = "the broker closed the permit's connection (restarted or stopped)"
            data = self._buf
            try:
                while chunk := sock.recv(4096):
                    data = (data + chunk)[-MAX_HEAD:]
                    for raw in data.split(b"\n"):
                        with contextlib.suppress(ValueError, AttributeError):
                            line = json.loads(raw)
                            if line.get("state") == "ended":
                                why = f"the broker ended it: {line.get('reason')}"
            except OSError:
                pass
            if not self._released:
                lost(why)

        self._watcher = threading.Thread(target=run, name=f"permit:{self.citizen}",
                                         daemon=True)
        self._watcher.start()

    def release(self) -> None:
        """Give the permit back (the broker sees the connection close)."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        self._released = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # the watcher's recv returns at once
        if self._watcher is not None:
            self._watcher.join(5.0)
        sock.close()

    def __enter__(self) -> Permit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------ reading

    def _read(self, sock: socket.socket, wake: socket.socket | None) -> bytes:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        if wake is not None:
            poller.register(wake, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if wake is not None and wake.fileno() in ready:
                raise Cancelled(f"{self.citizen}: the wait for a wake permit was given up")
            if ready:
                return sock.recv(65536)

    def _head(self, sock: socket.socket, wake: socket.socket | None) -> None:
        """Read the answer's head; :raises PermitUnavailable: it is not a 200."""
        while b"\r\n\r\n" not in self._buf:
            chunk = self._read(sock, wake)
            if not chunk or len(self._buf) > MAX_HEAD:
                raise PermitUnavailable("the broker's answer to a wake permit's request "
                                        "was cut")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(b"\r\n\r\n")
        parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if status == 200:
            return
        while len(self._buf) < MAX_HEAD and (chunk := self._read(sock, wake)):
            self._buf += chunk  # the refusal's JSON, until the broker closes
        try:
            message = json.loads(self._buf)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = self._buf[:300].decode(errors="replace")
        raise PermitUnavailable(f"the broker refused {self.citizen} a wake permit "
                                f"({status}): {message}")

    def _line(self, sock: socket.socket, wake: socket.socket | None) -> dict[str, Any] | None:
        """The next line of the answer; None when the broker closed."""
        while b"\n" not in self._buf:
            chunk = self._read(sock, wake)
            if not chunk:
                return None
            self._buf = (self._buf + chunk)[-MAX_HEAD:]
        raw, _, self._buf = self._buf.partition(b"\n")
        try:
            line = json.loads(raw)
        except ValueError:
            return {}
        return line if isinstance(line, dict) else {}


_MINE: list[Permit] = []  # this process's own permit (for_this_process), held until exit


def for_this_process(citizen: str) -> None:
    """On a server, hold `citizen`'s permit for the rest of this process - unless a parent
    holds it (HELD_ENV) or this is root's (the broker serves the operator's `citizen ask`
    and `doctor` without one). In dev mode nothing: the broker asks no permit of its one
    user, and a developer's `citizen wake` is its own foreground work.

    :raises PermitUnavailable: no broker, or it refused.
    """
    if not config.server_mode() or os.geteuid() == 0 or os.environ.get(HELD_ENV) or _MINE:
        return
    permit = Permit(citizen).wait(
        said=lambda ahead: log.info("waiting for a wake permit (%d ahead)", ahead))
    _MINE.append(permit)
    os.environ[HELD_ENV] = citizen  # what this process starts is covered by the same permit


def listing() -> dict[str, Any] | None:
    """The broker's view of the permits - {"limit", "lease_s", "holders": [{citizen,
    since, lease_left_s, connections}], "waiting": [{citizen, asked_at, ahead}]} - or
    None when no broker answers or it refuses the caller (a citizen's uid). A plain GET
    on the socket: `citizen status` imports no HTTP client for it, and starts no broker."""
    try:
        with client.connect(paths.broker_socket(), CONNECT_S) as sock:
            sock.settimeout(CONNECT_S)
            sock.sendall(f"GET {VIEW} HTTP/1.1\r\nHost: broker\r\nConnection: close\r\n\r\n"
                         .encode())
            raw = b""
            while len(raw) < MAX_VIEW and (chunk := sock.recv(65536)):
                raw += chunk
    except OSError:
        return None
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200 "):
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None
