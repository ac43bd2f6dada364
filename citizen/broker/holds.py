"""A shared document's update on several servers: read `FOR UPDATE` and written in one
transaction, which the broker holds open between the citizen's two calls.

The change is the citizen's code (a protocol's function over the document), so it runs
in the citizen's process, between `document/hold` (BEGIN; the row locked and read) and
`document/put` (written; COMMIT). Writers wait in PostgreSQL's queue for the row, as
they wait in the kernel's for a flock on one server: one try each, in turn. Written
only at the version read (documents.py's `document/write`) loses no update either, but
at 32 writers most tries lose the race and some writers never win (bench/
commons_engines.py measured it: 4.6 tries an update at 8 writers, none done at 32).

What a hold may cost others, bounded:
- each hold keeps one of the pool's connections: at most MAX_SHARE of the pool is held,
  so records, rings and the ledger always find one; a writer past it waits its turn;
- one hold a citizen at a time (its second process's waits its turn, at most WAIT_S);
- a hold lasts at most HOLD_S: a citizen that dies or stalls between its two calls is
  rolled back by the reaper (as the kernel drops a dead holder's flock), and its late
  `put` is refused (409: read and change again).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from citizen.broker.database import Database
from citizen.broker.refused import Refused

log = logging.getLogger(__name__)
HOLD_S = 10.0  # a document is held at most this long between hold and put
WAIT_S = 60.0  # a writer waits at most this long for its turn (a connection, then the row)
MAX_SHARE = 0.5  # of the pool's connections, at most this share held at once


@dataclass
class _Hold:
    citizen: str
    key: str
    conn: Any
    until: float
    lock: threading.Lock  # taken by whoever ends it: a put, a drop or the reaper
    turn: threading.Lock  # the citizen's one hold, released when it ends


class Holds:
    """The documents held open by one broker's citizens."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._held: dict[str, _Hold] = {}
        self._turns: dict[str, threading.Lock] = {}  # citizen -> held while it holds one
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, int(db.pool.max_size * MAX_SHARE)))
        self._stop = threading.Event()
        threading.Thread(target=self._reap, name="document-holds", daemon=True).start()

    def hold(self, citizen: str, key: str) -> dict[str, Any]:
        """Begin, lock and read `key`: {data, version, token} (version 0: not written yet).

        :raises Refused: 503 no turn within WAIT_S (the citizen's own other hold, a
            connection or the row).
        """
        with self._lock:
            turn = self._turns.setdefault(citizen, threading.Lock())
        if not turn.acquire(timeout=WAIT_S):
            raise Refused(503, "overloaded_error", f"{citizen} held another document for "
                          f"{WAIT_S:.0f} s; try again")
        try:
            return self._begin(citizen, key, turn)
        except BaseException:
            turn.release()
            raise

    def _begin(self, citizen: str, key: str, turn: threading.Lock) -> dict[str, Any]:
        import psycopg  # noqa: PLC0415 - only a civilization of several servers needs it

        started = time.monotonic()
        if not self._slots.acquire(timeout=WAIT_S):
            raise Refused(503, "overloaded_error", f"no turn for {key} within {WAIT_S:.0f} s: "
                          "the commons is busy; try again")
        try:
            conn = self.db.pool.getconn(timeout=max(1.0, WAIT_S - (time.monotonic() - started)))
        except Exception:
            self._slots.release()
            raise
        try:
            # Two round trips: the transaction, its bound on the wait for the row (a
            # holder past HOLD_S is rolled back by the reaper; SET LOCAL ends with it);
            # then the row made if new and locked, as FOR UPDATE would, and read.
            conn.execute(f"BEGIN; SET LOCAL statement_timeout = {int(WAIT_S * 1000)}")
            row = conn.execute("INSERT INTO documents (key, data, version) VALUES (%s, '{}', 0) "
                               "ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key "
                               "RETURNING data, version", (key,)).fetchone()
        except psycopg.Error:
            self._close(conn, commit=False)
            raise
        token = secrets.token_hex(12)
        with self._lock:
            self._held[token] = _Hold(citizen, key, conn, time.monotonic() + HOLD_S,
                                      threading.Lock(), turn)
        version = int(row[1]) if row else 0
        return {"key": key, "data": row[0] if row and version else None, "version": version,
                "token": token}

    def put(self, citizen: str, token: str, data: dict[str, Any]) -> int:
        """Write the held document and commit; its new version.

        :raises Refused: 409 no such hold of the citizen's (it ran out: read again)."""
        hold = self._take(citizen, token)
        try:
            row = hold.conn.execute("UPDATE documents SET data = %s, version = version + 1, "
                                    "written = clock_timestamp() WHERE key = %s RETURNING "
                                    "version", (json.dumps(data), hold.key)).fetchone()
            self._end(hold, commit=True)
        except Exception:
            self._end(hold, commit=False)
            raise
        return int(row[0]) if row else 0

    def drop(self, citizen: str, token: str) -> None:
        """Give the held document back unchanged (the citizen's change failed)."""
        self._end(self._take(citizen, token), commit=False)

    def _take(self, citizen: str, token: str) -> _Hold:
        with self._lock:
            hold = self._held.get(token)
            if hold is None or hold.citizen != citizen or not hold.lock.acquire(blocking=False):
                raise Refused(409, "conflict", f"no open hold {token[:6]}… of {citizen}: it "
                              f"ran past {HOLD_S:.0f} s and was rolled back - read again")
            del self._held[token]
        return hold

    def _end(self, hold: _Hold, *, commit: bool) -> None:
        try:
            self._close(hold.conn, commit=commit)
        finally:
            hold.turn.release()

    def _close(self, conn: Any, *, commit: bool) -> None:
        try:
            conn.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            self.db.pool.putconn(conn)
            self._slots.release()

    def _reap(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            with self._lock:
                late = [(t, h) for t, h in self._held.items()
                        if h.until < now and h.lock.acquire(blocking=False)]
                for token, _ in late:
                    del self._held[token]
            for _, hold in late:
                log.warning("%s held %s past %.0f s: rolled back", hold.citizen, hold.key,
                            HOLD_S)
                try:
                    self._end(hold, commit=False)
                except Exception as exc:  # noqa: BLE001 - a broken connection: the pool's
                    log.warning("rolling back %s: %s", hold.key, exc)


_ALL: weakref.WeakKeyDictionary[Database, Holds] = weakref.WeakKeyDictionary()
_ALL_LOCK = threading.Lock()


def of(db: Database) -> Holds:
    """The holds of the broker whose database is `db` (one reaper a broker)."""
    with _ALL_LOCK:
        if db not in _ALL:
            _ALL[db] = Holds(db)
        return _ALL[db]
