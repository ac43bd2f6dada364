"""Wake permits: at most `max_working_wakes` citizens work at once, civilization-wide.

A daemon whose gate says "work" asks here before it starts the wake process
(`POST /v1/experience/permit`, `citizen.access.permit`); the answer streams at once - a
line while it waits (how many are ahead), a line when it is granted (with its lease) -
and the permit is held while that connection stays open. So:

- **No citizen can forge one**: a permit is the citizen the kernel says is calling
  (`SO_PEERCRED`, `citizen.broker.identity.caller`; only root and the dev-mode user name
  one), and the broker refuses `POST /v1/messages` from a citizen holding none (`check`).
- **Nothing is leaked by a crash**: a killed holder's socket is closed by the kernel,
  and that frees the permit; a holder that keeps it open past its lease
  (`wake_permit_lease_s`, longer than a daemon's wake deadline) loses it - the broker
  says so on the line and closes the connection.
- **FIFO**: a citizen that gives its permit back and asks again queues behind everyone
  who asked meanwhile; it cannot keep a place by asking often. One exception, decided
  by the broker from its own records, never by what a caller says (`first`): a drawn
  reviewer that owes a report on a pending change queues ahead of the rest (FIFO among
  themselves) - a change's k test runs are what its verification waits for, and the
  adoption questions a verification rings out to every peer would otherwise hold every
  later change's reviews back behind N wakes (issue 43: verified within 10 minutes at
  a thousand).
- **One place per citizen**: a second request of a citizen that holds or waits shares
  that place (granted with it, released when the last of its connections closes, its
  lease counted from the first grant): the broker tells citizens apart, not their
  processes - a citizen's manual `citizen wake` beside its daemon's wake is one worker
  to the bound, and ten requests hold no ten places in the queue.
- **Waiting costs a blocked thread**: no CPU beyond a look every POSITION_S (is the
  caller still there, has its place moved), no model call, no money. The per-uid
  connection cap (`listener.MAX_CONNECTIONS_PER_UID`) bounds one citizen's threads.

Kept in the broker's memory only: a broker that restarts has closed every permit's
connection, and the daemons ask again (their wakes that held one are stopped: the bound
would not hold if they ran on beside the new broker's grants).
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from citizen.broker.refused import Refused
from citizen.broker.rules import broker_settings
from citizen.errors import ConfigError
from shared import clock

MAX_KEY, LEASE_KEY = "max_working_wakes", "wake_permit_lease_s"
# A daemon kills its wake at 1200 s (`citizen run --wake-timeout`) and waits 5 s more for
# it to go: a lease past both, so an honest daemon never loses its permit mid-wake.
LEASE_S = 1500.0
MAX_LEASE_S = 86400.0
POSITION_S = 5.0  # how often a waiter's place and connection are looked at
FIRST = 1 << 60  # taken off a ticket that goes ahead of the queue (see `first`)


def settings() -> tuple[int, float]:
    """(max_working_wakes, wake_permit_lease_s) from the operator's `broker.json`;
    unset: the CPUs, LEASE_S.

    :raises ConfigError: a value that is not one (the message names the file and fix).
    """
    path, data = broker_settings()
    cpus = os.cpu_count() or 1
    limit = data.get(MAX_KEY, cpus)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(path, MAX_KEY, f"{limit!r} is not a whole number of wakes, 1 or "
                          "more", f"give how many wakes may work at once in the whole "
                          f"civilization (unset: the CPUs, {cpus})")
    lease = data.get(LEASE_KEY, LEASE_S)
    if isinstance(lease, bool) or not isinstance(lease, int | float) \
            or not 1 <= lease <= MAX_LEASE_S:
        raise ConfigError(path, LEASE_KEY, f"{lease!r} is not a number of seconds from 1 "
                          f"to {MAX_LEASE_S:.0f}", "give the longest a wake may hold its "
                          f"permit, above the daemons' --wake-timeout (unset: {LEASE_S:.0f})")
    return limit, float(lease)


@dataclass(eq=False)
class Place:
    """One citizen's place: waiting in the queue, then holding a permit."""

    citizen: str
    ticket: int
    asked_at: str  # wall time (as a heartbeat's: a simulated clock does not run permits)
    granted: threading.Event = field(default_factory=threading.Event)
    until: float = 0.0  # monotonic: when the lease runs out (set at the grant)
    granted_at: str = ""
    users: int = 1  # connections sharing it
    gone: bool = False  # released or expired: out of the table


class Permits:
    """The queue and the permits granted, under one lock."""

    def __init__(self, read: Callable[[], tuple[int, float]] = settings,
                 first: Callable[[str], bool] | None = None) -> None:
        self._read = read
        # Whether a citizen's place goes ahead of the queue (the broker's own records say
        # it owes a drawn review: citizen.broker.reviews.owes_review, set by the service).
        self.first = first
        self._lock = threading.Lock()
        self._places: dict[str, Place] = {}  # citizen -> its place, waiting or holding
        self._queue: list[int] = []  # the waiting places' tickets, oldest first
        self._waiting: dict[int, Place] = {}
        self._held = 0
        self._tickets = itertools.count()
        self.limit, self.lease_s = 0, LEASE_S  # as last read (join reads them)

    def join(self, citizen: str) -> Place:
        """`citizen`'s place: the one it has (shared), or a new one at the back.

        :raises ConfigError: the operator's broker.json is not valid.
        """
        limit, lease = self._read()  # outside the lock: a file is read
        ahead = self._ahead_of_queue(citizen)  # outside the lock: records are read
        with self._lock:
            self.limit, self.lease_s = limit, lease
            place = self._places.get(citizen)
            if place is not None and place.granted.is_set() \
                    and time.monotonic() >= place.until:
                self._remove(place)  # its lease ran out: no sharing a dead permit
                place = None
            if place is not None:
                place.users += 1
                return place
            ticket = next(self._tickets) - (FIRST if ahead else 0)
            place = Place(citizen, ticket, clock.now(time.time()))
            self._places[citizen] = place
            bisect.insort(self._queue, place.ticket)
            self._waiting[place.ticket] = place
            self._grant()
            return place

    def _ahead_of_queue(self, citizen: str) -> bool:
        if self.first is None:
            return False
        try:
            return self.first(citizen)
        except Exception:  # noqa: BLE001 - a records problem costs the priority, not the permit
            return False

    def leave(self, place: Place) -> None:
        """One connection of `place` closed; the last frees it."""
        with self._lock:
            place.users -= 1
            if place.users <= 0 and not place.gone:
                self._remove(place)

    def expire(self, place: Place) -> None:
        """`place`'s lease ran out: the permit is gone, whoever still shares it."""
        with self._lock:
            if not place.gone:
                self._remove(place)

    def ahead(self, place: Place) -> int:
        """How many wait before `place`."""
        with self._lock:
            return bisect.bisect_left(self._queue, place.ticket)

    def holds(self, citizen: str) -> bool:
        """`citizen` holds a permit whose lease runs."""
        with self._lock:
            place = self._places.get(citizen)
            return place is not None and place.granted.is_set() \
                and time.monotonic() < place.until

    def idle(self) -> bool:
        """Nobody holds or waits."""
        with self._lock:
            return not self._places

    def check(self, citizen: str, uid: int) -> None:
        """A model call's permit check: root's callers (the operator's `citizen ask`,
        `doctor`) and, in dev mode, the one user everything runs as go without one - the
        kernel cannot tell those apart from the operator.

        :raises Refused: 403 - `citizen` holds no permit.
        """
        if uid in (0, os.geteuid()) or self.holds(citizen):
            return
        raise Refused(403, "permission_error",
                      f"{citizen} holds no wake permit: a wake's model calls need one "
                      "(its daemon asks POST /v1/experience/permit before starting it; "
                      f"{MAX_KEY} in the operator's broker.json bounds how many run at "
                      "once) - run the wake from its daemon, or ask for a permit first")

    def view(self) -> dict[str, Any]:
        """The limit, who holds a permit (and for how long still), who waits, in order."""
        now = time.monotonic()
        with self._lock:
            holders = [{"citizen": p.citizen, "since": p.granted_at, "connections": p.users,
                        "lease_left_s": round(max(0.0, p.until - now), 1)}
                       for p in self._places.values() if p.granted.is_set()]
            waiting = [{"citizen": p.citizen, "asked_at": p.asked_at, "ahead": i,
                        "connections": p.users}
                       for i, p in enumerate(self._waiting[t] for t in self._queue)]
            return {"limit": self.limit, "lease_s": self.lease_s, "holders": holders,
                    "waiting": waiting}

    # ------------------------------------------------------------ under the lock

    def _grant(self) -> None:
        while self._queue and self._held < self.limit:
            place = self._waiting.pop(self._queue.pop(0))
            place.until = time.monotonic() + self.lease_s
            place.granted_at = clock.now(time.time())
            self._held += 1
            place.granted.set()

    def _remove(self, place: Place) -> None:
        place.gone = True
        del self._places[place.citizen]
        if place.granted.is_set():
            self._held -= 1
        else:
            i = bisect.bisect_left(self._queue, place.ticket)
            del self._queue[i]
            del self._waiting[place.ticket]
        self._grant()


# ---------------------------------------------------------------- one connection

def serve(permits: Permits, citizen: str, conn: socket.socket,
          start: Callable[[], None]) -> None:
    """Answer a permit request on `conn`: `start()` sends the response's head, then a
    JSON line per change - {"state": "waiting", "ahead": n}, {"state": "granted",
    "lease_s": s}, and {"state": "ended", "reason": …} when the lease runs out - until
    the caller closes the connection (or sends anything: that gives it back too).

    :raises Refused: 500 - the operator's broker.json is not valid.
    """
    try:
        place = permits.join(citizen)
    except ConfigError as exc:
        raise Refused(500, "api_error", f"no wake permit can be given: {exc}") from exc
    try:
        start()
        if _turn(permits, place, conn):
            _hold(permits, place, conn)
    except OSError:
        pass  # the caller went away: its permit, or its place, is freed below
    finally:
        permits.leave(place)


def _turn(permits: Permits, place: Place, conn: socket.socket) -> bool:
    """Wait for the grant, saying the place when it moves; False: the caller left."""
    said = None
    wait = 0.0  # the first look at once: the caller learns its place without delay
    while not place.granted.wait(wait):
        wait = POSITION_S
        if _spoke(conn, 0):
            return False
        ahead = permits.ahead(place)
        if ahead != said:
            _line(conn, {"state": "waiting", "ahead": ahead, "limit": permits.limit})
            said = ahead
    return True


def _hold(permits: Permits, place: Place, conn: socket.socket) -> None:
    """Granted: say so, then hold until the caller closes or the lease runs out."""
    _line(conn, {"state": "granted", "lease_s": round(place.until - time.monotonic(), 3)})
    while (left := place.until - time.monotonic()) > 0:
        if _spoke(conn, left):
            return
    permits.expire(place)
    _line(conn, {"state": "ended", "reason": f"its lease of {permits.lease_s:.0f} s ran out "
                 f"({LEASE_KEY} in the operator's broker.json); ask again"})


def _spoke(conn: socket.socket, timeout_s: float) -> bool:
    """Whether the caller closed its end (or sent something) within `timeout_s`."""
    poller = select.poll()  # not select(): a broker of a thousand connections has fds past 1024
    poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(0, int(timeout_s * 1000) + 1) if timeout_s else 0))


def _line(conn: socket.socket, data: dict[str, Any]) -> None:
    conn.sendall(json.dumps(data).encode() + b"\n")
