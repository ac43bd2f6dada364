"""Rings across servers: one `LISTEN` per server's broker, for all its citizens.

A ring (`citizen.broker.commons.ring`) is a `NOTIFY` on one channel every broker
listens to; each keeps the rings of the citizens living on its own server until its
scheduler takes them (`GET /v1/experience/views/rings?wait=S`, a long poll served to
root and the scheduler's user only), and ignores the others'. The scheduler starts the
wake as it does for a doorbell file (`citizen.daemon.crowd`). A kernel object
per server, not per citizen: a thousand citizens share this one connection.

A ring is a hint, as the doorbell is on one server: one lost while the database or this
listener is down costs only promptness - the work waits for the citizen's scheduled
wake, which finds it in the commons. So the listener reconnects (1 s, doubling to 30 s)
and keeps at most MAX_WAITING rings a citizen (the oldest dropped: a flood of rings
from peers must not grow the broker's memory).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
CHANNEL = "experience_doorbell"  # every broker's one LISTEN (citizen.broker.commons rings)
MAX_WAIT_S = 30.0  # one poll's longest wait: the scheduler's stop is heard within it
MAX_WAITING = 64  # rings kept per citizen until taken
FIRST_RETRY_S, LAST_RETRY_S = 1.0, 30.0


@dataclass(frozen=True)
class Ring:
    citizen: str
    wake_type: str
    reason: str
    sender: str
    heard: float  # time.monotonic() when this broker heard it (the bench's latency)


class Rings:
    """The rings heard for this server's citizens, until taken."""

    def __init__(self) -> None:
        self._waiting: dict[str, deque[Ring]] = defaultdict(lambda: deque(maxlen=MAX_WAITING))
        self._cond = threading.Condition()

    def add(self, ring: Ring) -> None:
        with self._cond:
            self._waiting[ring.citizen].append(ring)
            self._cond.notify_all()

    def take(self, timeout: float = 0.0) -> list[Ring]:
        """Every waiting ring (oldest first per citizen), waiting up to `timeout` s for one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._waiting and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            out = [r for q in self._waiting.values() for r in q]
            self._waiting.clear()
        return out


def parse(payload: str) -> Ring | None:
    """A NOTIFY payload as a ring; None (logged) for anything else on the channel."""
    try:
        data: Any = json.loads(payload)
        ring = Ring(str(data["citizen"]), str(data["wake_type"]), str(data.get("reason", "")),
                    str(data.get("sender", "?")), time.monotonic())
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring a ring that is not one (%s): %.80r", exc, payload)
        return None
    return ring


class Listener:
    """The thread holding this broker's LISTEN connection."""

    def __init__(self, dsn: str, mine: Any, rings: Rings) -> None:
        self.dsn = dsn
        self.mine = mine  # citizen name -> whether it lives on this server
        self.rings = rings
        self.stop = threading.Event()
        self.listening = threading.Event()  # set while LISTEN is in force
        self.thread = threading.Thread(target=self._run, name="rings", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5.0)

    def _run(self) -> None:
        import psycopg  # noqa: PLC0415 - only a civilization of several servers needs it

        retry = FIRST_RETRY_S
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    retry = FIRST_RETRY_S
                    while not self.stop.is_set():
                        # A bounded wait, so a stop is heard within a second.
                        for note in conn.notifies(timeout=1.0):
                            ring = parse(note.payload)
                            if ring is not None and self.mine(ring.citizen):
                                self.rings.add(ring)
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning("the rings' LISTEN connection failed (%s); again in %.0f s",
                            exc, retry)
                self.stop.wait(retry)
                retry = min(retry * 2, LAST_RETRY_S)
        self.listening.clear()
