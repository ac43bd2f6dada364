"""The broker's ledger: every forwarded model call, reserved before and settled after.

One SQLite database in WAL mode, written by the broker process alone (its user's 0700
state directory on a server). A call moves `reserved` -> `settled` (the real cost from
the response) or `released` (the upstream refused it: nothing was billed); a call whose
worst case did not fit a cap is a `refused` row at $0 (nothing reserved, never forwarded). A broker
killed mid-call leaves its reservations `reserved`; the next start marks them
`orphaned` and counts them at their worst case, so no call is ever unaccounted for.

Durability: `synchronous=NORMAL` in WAL mode - a commit is in the kernel before the call
is forwarded, so it survives `kill -9` of the broker (the process), which is what a
hostile or crashing caller can cause; only a power loss can drop the last commits, and
then the provider's own bill is the record. FULL would fsync every call (≈1-5 ms here).

The totals the caps are checked against are kept in memory (loaded at start) and
changed under one lock with each row, so a reservation is one small transaction.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citizen.errors import CitizenError, LimitReached
from citizen.llm.base import Usage  # what the upstream said a call used
from shared import clock

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    citizen TEXT NOT NULL,
    day TEXT NOT NULL,
    month TEXT NOT NULL,
    ts TEXT NOT NULL,
    model TEXT NOT NULL,
    purpose TEXT NOT NULL DEFAULT '',
    reserved_usd REAL NOT NULL,
    cost_usd REAL,
    state TEXT NOT NULL,
    status INTEGER,
    input_tokens INTEGER, output_tokens INTEGER, cache_write_tokens INTEGER,
    cache_read_tokens INTEGER
);
CREATE INDEX IF NOT EXISTS calls_day ON calls (day, citizen);
CREATE INDEX IF NOT EXISTS calls_month ON calls (month, citizen);
CREATE INDEX IF NOT EXISTS calls_open ON calls (state) WHERE state = 'reserved';
"""
CIVILIZATION = "*"  # the totals key of every citizen together
FILE = "ledger.db"  # its name in the broker's state directory (citizen.config.paths)


class CapExceeded(LimitReached):
    """A call's worst case does not fit a cap; it was not forwarded."""


class LedgerUnavailable(CitizenError):
    """The ledger cannot be reached (a shared one's database is down): no call is
    forwarded unrecorded."""


@dataclass(frozen=True)
class Caps:
    """Dollar caps for one caller: its own day and month, and the civilization's."""

    citizen_day: float
    citizen_month: float
    civilization_day: float
    civilization_month: float



class Ledger:
    """The broker's record of money: reserve, settle, release, and the totals."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # check_same_thread=False: one connection for the server's threads, every use
        # under self._lock (SQLite's own locking is per connection, not per thread).
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # survives kill -9 (module doc)
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.orphaned = self._recover()
        # (period key, citizen) -> dollars reserved or spent; CIVILIZATION for everyone.
        self._totals: dict[tuple[str, str], float] = defaultdict(float)
        self._load_totals()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------ the two steps

    def reserve(self, citizen: str, model: str, usd: float, caps: Caps,
                purpose: str = "") -> int:
        """Reserve `usd` for one call of `citizen`; its id.

        :raises CapExceeded: it would cross one of `caps` (the message names which).
        """
        day, month = clock.today().isoformat(), clock.today().isoformat()[:7]
        with self._lock:
            for key, who, cap, what in (
                    (day, citizen, caps.citizen_day, f"{citizen}'s daily cap "
                     "(budget.max_usd_per_day)"),
                    (month, citizen, caps.citizen_month, f"{citizen}'s monthly cap "
                     "(budget.max_usd_per_month)"),
                    (day, CIVILIZATION, caps.civilization_day, "the civilization's daily cap "
                     "(civilization_usd_per_day in broker.json)"),
                    (month, CIVILIZATION, caps.civilization_month, "the civilization's monthly "
                     "cap (civilization_usd_per_month in broker.json)")):
                used = self._totals[(key, who)]
                if used + usd > cap:
                    # Kept as a row at $0 (the operator sees refusals, `citizen spend`
                    # and the dashboard): it reserves nothing and counts in no total.
                    self._db.execute(
                        "INSERT INTO calls (citizen, day, month, ts, model, purpose, "
                        "reserved_usd, cost_usd, state) VALUES (?, ?, ?, ?, ?, ?, ?, 0, "
                        "'refused')", (citizen, day, month, clock.now(), model, purpose[:80], usd))
                    raise CapExceeded(
                        f"this call could cost ${usd:.4f} and ${used:.4f} of {what} of "
                        f"${cap:.2f} is spent or reserved - it was not forwarded; the "
                        "operator can raise the cap, or the work waits for the next period")
            cur = self._db.execute(
                "INSERT INTO calls (citizen, day, month, ts, model, purpose, reserved_usd, "
                "state) VALUES (?, ?, ?, ?, ?, ?, ?, 'reserved')",
                (citizen, day, month, clock.now(), model, purpose[:80], usd))
            self._add(day, month, citizen, usd)
            return int(cur.lastrowid or 0)

    def settle(self, call: int, cost: float, usage: Usage, status: int) -> None:
        """The call's real cost (capped at no less than 0), replacing its reservation."""
        self._close(call, "settled", max(cost, 0.0), usage, status)

    def release(self, call: int, status: int) -> None:
        """The upstream refused the call (nothing billed): its reservation is freed."""
        self._close(call, "released", 0.0, Usage(), status)

    def charge_reserved(self, call: int, status: int) -> None:
        """What the call cost is unknown (the answer was cut): it costs its reservation."""
        with self._lock:
            row = self._db.execute("SELECT reserved_usd FROM calls WHERE id = ?",
                                   (call,)).fetchone()
        self._close(call, "settled", float(row[0]) if row else 0.0, Usage(), status)

    def _close(self, call: int, state: str, cost: float, usage: Usage, status: int) -> None:
        with self._lock:
            row = self._db.execute(
                "SELECT citizen, day, month, reserved_usd FROM calls "
                "WHERE id = ? AND state = 'reserved'", (call,)).fetchone()
            if row is None:
                return  # closed already (or never ours): nothing moves twice
            citizen, day, month, reserved = row
            self._db.execute(
                "UPDATE calls SET state = ?, cost_usd = ?, status = ?, input_tokens = ?, "
                "output_tokens = ?, cache_write_tokens = ?, cache_read_tokens = ? "
                "WHERE id = ?",
                (state, cost, status, usage.input_tokens, usage.output_tokens,
                 usage.cache_write_tokens, usage.cache_read_tokens, call))
            self._add(day, month, citizen, cost - float(reserved))

    # ------------------------------------------------------------ reading

    def spent(self, citizen: str, day: str | None = None) -> float:
        """Dollars spent or reserved by `citizen` (CIVILIZATION: everyone) on `day`."""
        with self._lock:
            return self._totals[(day or clock.today().isoformat(), citizen)]

    # ------------------------------------------------------------ internals

    def _add(self, day: str, month: str, citizen: str, usd: float) -> None:
        for key in (day, month):
            self._totals[(key, citizen)] += usd
            self._totals[(key, CIVILIZATION)] += usd

    def _recover(self) -> int:
        """Reservations a killed broker left open count at their worst case."""
        with self._lock:
            cur = self._db.execute("UPDATE calls SET state = 'orphaned', "
                                   "cost_usd = reserved_usd WHERE state = 'reserved'")
            return cur.rowcount

    def _load_totals(self) -> None:
        month = clock.today().isoformat()[:7]
        with self._lock:
            for citizen, day, mon, reserved, cost, state in self._db.execute(
                    "SELECT citizen, day, month, reserved_usd, cost_usd, state FROM calls "
                    "WHERE month >= ?", (month,)):
                usd = float(reserved) if state == "reserved" else float(cost or 0.0)
                self._add(day, mon, citizen, usd)


def open_readonly(path: Path) -> sqlite3.Connection:
    """The ledger for a reader (`citizen spend`): read-only, never creating it."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def calls_since(path: Path, day: str) -> list[dict[str, Any]]:
    """Every row of the ledger at `path` from UTC `day` on, oldest first (read-only;
    none when the broker has not made it yet).

    :raises sqlite3.Error: it cannot be read (on a server only its user and root may).
    """
    if not path.exists():  # the broker creates it at its first start: no call yet
        return []
    db = open_readonly(path)
    try:
        cur = db.execute("SELECT citizen, day, state, reserved_usd, cost_usd, model, purpose, "
                         "input_tokens, cache_write_tokens, cache_read_tokens "
                         "FROM calls WHERE day >= ? ORDER BY id", (day,))
        return [dict(zip(("citizen", "day", "state", "reserved", "cost", "model", "purpose",
                          "tokens_in", "cache_write", "cache_read"), r, strict=True))
                for r in cur.fetchall()]
    finally:
        db.close()


def refused_per_day(path: Path, day: str, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The refused calls per UTC day and citizen from `day` on: ([{day, citizen, refused,
    usd}] oldest first, the newest `limit` only; whether older ones were left off).
    `usd` is what the refused reservations asked for. Read-only, as `calls_since`.

    :raises sqlite3.Error: it cannot be read.
    """
    if not path.exists():
        return [], False
    db = open_readonly(path)
    try:
        cur = db.execute("SELECT day, citizen, COUNT(*), SUM(reserved_usd) FROM calls "
                         "WHERE day >= ? AND state = 'refused' GROUP BY day, citizen "
                         "ORDER BY day DESC, citizen DESC LIMIT ?", (day, limit + 1))
        rows = cur.fetchall()
    finally:
        db.close()
    return ([{"day": d, "citizen": c, "refused": n, "usd": round(float(usd or 0.0), 6)}
             for d, c, n, usd in reversed(rows[:limit])], len(rows) > limit)
