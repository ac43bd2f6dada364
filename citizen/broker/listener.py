"""The broker's listening socket: one thread per connection, a cap per Unix user, and
(dev mode) stopping when idle or when its civilization is deleted."""

from __future__ import annotations

import os
import resource
import socketserver
import threading
import time
from pathlib import Path
from typing import Any

from citizen.broker.server import Broker, Handler, Serving
from shared.identity import peer_uid

# One Unix user's open connections (server mode): each holds a thread and a descriptor,
# and a citizen holding a thousand idle ones took them from every other citizen.
MAX_CONNECTIONS_PER_UID = 32


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer, Serving):
    """The listening socket; one thread per connection, none outliving the broker."""

    daemon_threads = True
    request_queue_size = 512  # 100 citizens connecting at once must not see ECONNREFUSED
    broker: Broker

    def __init__(self, path: Path, broker: Broker, *, mode: int) -> None:
        self.broker = broker
        self._open: dict[int, int] = {}  # uid -> connections open (server mode)
        self._open_lock = threading.Lock()
        super().__init__(str(path), Handler)
        os.chmod(path, mode)  # door: the broker's socket, in its own run folder

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection - unless its user has MAX_CONNECTIONS_PER_UID open
        already (server mode; dev mode is one user): then it is closed at once."""
        uid = peer_uid(request) if self.broker.server_mode else -1
        with self._open_lock:
            if uid >= 0 and self._open.get(uid, 0) >= MAX_CONNECTIONS_PER_UID:
                self.shutdown_request(request)
                return
            self._open[uid] = self._open.get(uid, 0) + 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed(uid)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        uid = peer_uid(request) if self.broker.server_mode else -1  # before closing
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed(uid)

    def _closed(self, uid: int) -> None:
        with self._open_lock:
            self._open[uid] -= 1
            if not self._open[uid]:
                del self._open[uid]


def listen(path: Path, broker: Broker, *, server_mode: bool) -> Server:
    """Bind the socket at `path`, replacing a dead broker's socket (the caller holds the
    broker's lock, so no live broker owns it)."""
    try:
        if path.is_socket() and not path.is_symlink():
            path.unlink()
    except FileNotFoundError:
        pass
    # Each waiter for a wake permit holds a connection: lift the soft limit on open files
    # to the hard one (no privilege needed; systemd's unit sets both) so a thousand fit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard not in (soft, resource.RLIM_INFINITY):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Server: anyone may connect - identity comes from SO_PEERCRED and only citizens and
    # root are served. Dev mode: the developer alone.
    return Server(path, broker, mode=0o666 if server_mode else 0o600)


def idle_watch(server: Server, idle_s: float, stop: threading.Event, state: Path) -> None:
    """Shut the server down after `idle_s` seconds without a request, or once its state
    directory is gone (a dev-mode civilization deleted under it)."""
    while not stop.wait(min(idle_s, 1.0)):
        idle = time.monotonic() - server.broker.last_active > idle_s
        # Never while a permit is held or waited for: its connection is the permit.
        if (idle or not state.is_dir()) and server.broker.limiter.idle() \
                and server.broker.permits.idle():
            server.shutdown()
            return

