"""The civilization's one ledger across servers: its `spend` and `calls` tables.

Chosen when the operator's `civilization.json` names a database (citizen.broker.service);
the interface is `citizen.broker.ledger.Ledger`'s, and so are its states: a call moves
`reserved` -> `settled` or `released`, a call that did not fit a cap is a `refused` row
at $0, and a reservation a killed broker left open becomes `orphaned` at its worst case
when that server's broker starts again.

A reservation is one statement: it locks the four `spend` rows of the call (the
citizen's day and month, the civilization's day and month) in one fixed order, checks
that the call's worst case fits all four caps, raises them and adds the `calls` row. Two
servers racing calls against the civilization's cap queue on its rows and the second sees
what the first reserved, so a cap holds however many servers spend against it
(tests/test_spend_shared.py races two). Closing a call moves `used` by what it cost less
what it reserved, once: a row already closed moves nothing.

What a server's role may write is the schema's (sql/civilization.sql): `calls` rows only
of its own citizens and only as itself, `spend` rows only of its own citizens and the
civilization's. Money is `numeric` in the database and a float only at this edge.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from citizen.broker import database, ledger
from citizen.broker.database import Database
from citizen.broker.ledger import CIVILIZATION, CapExceeded, Caps, Ledger, LedgerUnavailable
from citizen.errors import CitizenError
from citizen.llm.base import Usage  # what the upstream said a call used
from shared import clock

__all__ = ["NotHere", "SharedLedger", "Spending"]
T = TypeVar("T")

# The cap each of a call's four periods is checked against, in ledger.py's order (the
# first that does not fit is the one a refusal names), with ledger.py's words for it.
_CAP_NAMES = (
    "{citizen}'s daily cap (budget.max_usd_per_day)",
    "{citizen}'s monthly cap (budget.max_usd_per_month)",
    "the civilization's daily cap (civilization_usd_per_day in broker.json)",
    "the civilization's monthly cap (civilization_usd_per_month in broker.json)",
)

# The four rows a call counts in, made once (a reservation finds fewer than four only on
# a citizen's first call of a day or month). The database refuses another server's
# citizen here: `spend_add` (row-level security).
_ENSURE = """
INSERT INTO spend (citizen, period) VALUES (%(who)s, %(day)s), (%(who)s, %(month)s),
    ('*', %(day)s), ('*', %(month)s) ON CONFLICT DO NOTHING
"""

# One statement, one transaction (autocommit) at READ COMMITTED, PostgreSQL's default.
# Why that suffices: `FOR UPDATE` waits for a racing transaction that holds a row, and
# when it commits re-reads the row's newest committed version (not the one of this
# statement's snapshot) before locking it, so `locked.used` is what every server has
# reserved so far and stays so until this statement commits. A plain SELECT and then an
# UPDATE (check, then raise) lets two servers both read the same `used`, both find room
# and both raise it: the cap is crossed (tests/test_spend_shared.py performs it).
# The rows are locked in one order (bytewise, COLLATE "C") by every statement here, so
# two calls of one citizen never hold one row each while waiting for the other's.
# Fewer than four rows found: nothing is raised or added (the caller makes them, _ENSURE,
# and asks again). Every call of the civilization queues on its two rows for the time of
# this statement and its commit: bench/spend.py measures what that costs.
_RESERVE = """
WITH caps (citizen, period, cap, rank) AS (
    VALUES (%(who)s, %(day)s, %(cd)s::numeric, 1), (%(who)s, %(month)s, %(cm)s::numeric, 2),
           ('*', %(day)s, %(vd)s::numeric, 3), ('*', %(month)s, %(vm)s::numeric, 4)),
locked AS MATERIALIZED (
    SELECT s.citizen, s.period, s.used FROM spend s
    WHERE s.citizen IN (%(who)s, '*') AND s.period IN (%(day)s, %(month)s)
    ORDER BY s.citizen COLLATE "C", s.period COLLATE "C"
    FOR UPDATE),
over AS (
    SELECT c.rank, l.used, c.cap FROM locked l JOIN caps c USING (citizen, period)
    WHERE l.used + %(usd)s::numeric > c.cap ORDER BY c.rank LIMIT 1),
verdict AS (
    SELECT (SELECT count(*) FROM locked) AS found, NOT EXISTS (SELECT 1 FROM over) AS fits),
raised AS (
    UPDATE spend s SET used = s.used + %(usd)s::numeric FROM locked l, verdict v
    WHERE v.found = 4 AND v.fits AND s.citizen = l.citizen AND s.period = l.period),
call AS (
    INSERT INTO calls (citizen, day, month, ts, model, purpose, reserved_usd, cost_usd, state)
    SELECT %(who)s, %(day)s, %(month)s, %(ts)s, %(model)s, %(purpose)s, %(usd)s::numeric,
           CASE WHEN v.fits THEN NULL ELSE 0 END,
           CASE WHEN v.fits THEN 'reserved' ELSE 'refused' END
    FROM verdict v WHERE v.found = 4
    RETURNING id)
SELECT v.found, (SELECT id FROM call), o.rank, o.used, o.cap
FROM verdict v LEFT JOIN over o ON true
"""

# Closing a call: its row once (`state = 'reserved'`: a second close, or one racing it,
# finds none after the first commits - READ COMMITTED re-checks the newest version), then
# its four `spend` rows locked in _RESERVE's order and moved by cost - reserved.
# cost NULL: what it reserved (charge_reserved). Another server's call is invisible to
# this UPDATE (`calls_close`): it closes nothing.
_CLOSE = """
WITH closed AS (
    UPDATE calls SET state = %(state)s, cost_usd = COALESCE(%(cost)s::numeric, reserved_usd),
        status = %(status)s, input_tokens = %(inp)s, output_tokens = %(out)s,
        cache_write_tokens = %(cw)s, cache_read_tokens = %(cr)s
    WHERE id = %(id)s AND state = 'reserved'
    RETURNING citizen, day, month, cost_usd - reserved_usd AS delta),
locked AS MATERIALIZED (
    SELECT s.citizen, s.period, c.delta FROM spend s
    JOIN closed c ON s.citizen IN (c.citizen, '*') AND s.period IN (c.day, c.month)
    ORDER BY s.citizen COLLATE "C", s.period COLLATE "C"
    FOR UPDATE OF s)
UPDATE spend s SET used = s.used + l.delta FROM locked l
WHERE s.citizen = l.citizen AND s.period = l.period
"""

# This server's open reservations at its broker's start: its broker was killed with them
# open, so each counts at its worst case - what it reserved, which `used` already holds.
# Another server's are not ours to judge (its broker may be running): `server` says whose.
_RECOVER = """
UPDATE calls SET state = 'orphaned', cost_usd = reserved_usd
WHERE server = my_server() AND state = 'reserved'
"""


class Spending(Protocol):
    """What the broker asks of its ledger: this server's SQLite (ledger.Ledger) or the
    civilization's shared one (SharedLedger)."""

    orphaned: int

    def reserve(self, citizen: str, model: str, usd: float, caps: Caps,
                purpose: str = "") -> int: ...

    def settle(self, call: int, cost: float, usage: Usage, status: int) -> None: ...

    def release(self, call: int, status: int) -> None: ...

    def charge_reserved(self, call: int, status: int) -> None: ...

    def spent(self, citizen: str, day: str | None = None) -> float: ...

    def close(self) -> None: ...


log = logging.getLogger(__name__)


class NotHere(CitizenError, PermissionError):
    """The civilization's database refused this server a citizen's row: the citizen
    lives on another server, or on none yet."""


def _usd(x: float) -> Decimal:
    """A float of dollars as numeric: its shortest exact digits (0.1 is 0.1, not
    0.1000000000000000055…), so sums in the database are exact."""
    return Decimal(repr(float(x)))


class SharedLedger:
    """The civilization's record of money, shared by every server's broker."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # This server's reservations a killed broker left open become orphaned before
        # this broker reserves anything (after, it would orphan its own): at start, or -
        # the database down at start - before its first reservation.
        self._recover_lock = threading.Lock()
        self._recovered = False
        self.orphaned = 0
        try:
            self._recover()
        except LedgerUnavailable as exc:
            log.warning("%s", exc)

    def _recover(self) -> None:
        with self._recover_lock:
            if not self._recovered:
                self.orphaned = self._run(lambda conn: conn.execute(_RECOVER).rowcount)
                self._recovered = True

    def close(self) -> None:
        """Nothing of its own to close: the pool is the broker's (`Database.close`)."""

    # ------------------------------------------------------------ the two steps

    def reserve(self, citizen: str, model: str, usd: float, caps: Caps,
                purpose: str = "") -> int:
        """Reserve `usd` for one call of `citizen`; its id.

        :raises CapExceeded: it would cross one of `caps` (the message names which).
        :raises NotHere: `citizen` does not live on this server (the database says).
        """
        if citizen == CIVILIZATION:
            raise ValueError(f"{CIVILIZATION!r} is the civilization's total, no caller")
        if not self._recovered:
            self._recover()
        day = clock.today().isoformat()
        args = {"who": citizen, "day": day, "month": day[:7], "ts": clock.now(),
                "model": model, "purpose": purpose[:80], "usd": _usd(usd),
                "cd": _usd(caps.citizen_day), "cm": _usd(caps.citizen_month),
                "vd": _usd(caps.civilization_day), "vm": _usd(caps.civilization_month)}
        import psycopg  # noqa: PLC0415 - installed wherever a Database was opened

        try:
            row = self._run(lambda conn: conn.execute(_RESERVE, args).fetchone())
            if row[0] != 4:  # this citizen's first call of the day or month
                self._run(lambda conn: conn.execute(_ENSURE, args))
                row = self._run(lambda conn: conn.execute(_RESERVE, args).fetchone())
        except psycopg.errors.InsufficientPrivilege as exc:
            raise self._not_here(citizen) from exc
        found, call, rank, used, cap = row
        if found != 4:  # rows the policies hide from this server: not its citizen
            raise self._not_here(citizen)
        if rank is not None:
            what = _CAP_NAMES[rank - 1].format(citizen=citizen)
            raise CapExceeded(
                f"this call could cost ${usd:.4f} and ${float(used):.4f} of {what} of "
                f"${float(cap):.2f} is spent or reserved - it was not forwarded; the "
                "operator can raise the cap, or the work waits for the next period")
        return int(call)

    def settle(self, call: int, cost: float, usage: Usage, status: int) -> None:
        """The call's real cost (capped at no less than 0), replacing its reservation."""
        self._close(call, "settled", _usd(max(cost, 0.0)), usage, status)

    def release(self, call: int, status: int) -> None:
        """The upstream refused the call (nothing billed): its reservation is freed."""
        self._close(call, "released", Decimal(0), Usage(), status)

    def charge_reserved(self, call: int, status: int) -> None:
        """What the call cost is unknown (the answer was cut): it costs its reservation."""
        self._close(call, "settled", None, Usage(), status)

    def _close(self, call: int, state: str, cost: Decimal | None, usage: Usage,
               status: int) -> None:
        args = {"id": call, "state": state, "cost": cost, "status": status,
                "inp": usage.input_tokens, "out": usage.output_tokens,
                "cw": usage.cache_write_tokens, "cr": usage.cache_read_tokens}
        self._run(lambda conn: conn.execute(_CLOSE, args))

    # ------------------------------------------------------------ reading

    def spent(self, citizen: str, day: str | None = None) -> float:
        """Dollars spent or reserved by `citizen` (CIVILIZATION: everyone, on every
        server) on `day`."""
        period = day or clock.today().isoformat()
        row = self._run(lambda conn: conn.execute(
            "SELECT used FROM spend WHERE citizen = %s AND period = %s",
            (citizen, period)).fetchone())
        return float(row[0]) if row else 0.0

    # ------------------------------------------------------------ internals

    def _not_here(self, citizen: str) -> NotHere:
        return NotHere(f"the civilization's database refuses server {self.db.server} a "
                       f"model call for {citizen}: {citizen} does not live on this server - "
                       "its broker claims it when it joins (Database.claim), or the "
                       "operator moves it here (a backup and restore, DEPLOY.md)")

    def _run(self, work: Callable[[Any], T]) -> T:
        """`work` on a pooled connection; once more on another if the database dropped
        the one it had (a restart of the database leaves the pool's idle ones dead).

        A statement cut by the lost connection may have committed: a reservation made
        twice then counts twice - the caps err towards refusing, and the lost one's row
        becomes `orphaned` at this broker's next start. A close is idempotent.
        """
        import psycopg  # noqa: PLC0415
        from psycopg_pool import PoolTimeout  # noqa: PLC0415

        try:
            with self.db.connection() as conn:
                try:
                    return work(conn)
                except psycopg.OperationalError:
                    if not conn.broken:
                        raise
            # The connection was lost (the pool has dropped it); the others may be dead too.
            self.db.pool.check()
            with self.db.connection() as conn:
                return work(conn)
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise LedgerUnavailable(f"the civilization's ledger cannot be reached ({exc}); "
                                    "no call goes out until it can - the database's "
                                    "operator: systemctl status postgresql") from exc


if TYPE_CHECKING:  # both ledgers have the broker's interface: mypy says so here
    _LEDGERS: tuple[type[Spending], ...] = (Ledger, SharedLedger)


# ---------------------------------------------------------------- readers (spend, views)

_CALLS = ("SELECT citizen, day, state, reserved_usd::float8, cost_usd::float8, model, purpose, "
          "input_tokens, cache_write_tokens, cache_read_tokens FROM calls WHERE day >= %s "
          "ORDER BY id")
_REFUSED = ("SELECT day, citizen, count(*), sum(reserved_usd)::float8 FROM calls "
            "WHERE day >= %s AND state = 'refused' GROUP BY day, citizen "
            "ORDER BY day DESC, citizen DESC LIMIT %s")


def _read(settings: database.Settings, query: str,
          args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Rows of the civilization's ledger, on a connection of this server's role (its
    passfile: the broker's user's and root's to read).

    :raises LedgerUnavailable: the database cannot be reached or read.
    """
    import psycopg  # noqa: PLC0415

    try:
        with psycopg.connect(settings.dsn, connect_timeout=10) as conn:
            return conn.execute(query, args).fetchall()
    except psycopg.Error as exc:
        raise LedgerUnavailable(f"the civilization's ledger cannot be read ({exc}) - as "
                                "root or the broker's user, with the database up") from exc


def calls_since(state: Path, day: str) -> list[dict[str, Any]]:
    """Every call from UTC `day` on, oldest first: from the civilization's ledger when
    civilization.json names one (every server's calls), else this server's SQLite file
    in `state` (ledger.calls_since).

    :raises LedgerUnavailable | sqlite3.Error: it cannot be read.
    """
    if (settings := database.settings()) is None:
        return ledger.calls_since(state / ledger.FILE, day)
    keys = ("citizen", "day", "state", "reserved", "cost", "model", "purpose", "tokens_in",
            "cache_write", "cache_read")
    return [dict(zip(keys, r, strict=True)) for r in _read(settings, _CALLS, (day,))]


def refused_per_day(state: Path, day: str, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """ledger.refused_per_day, from whichever ledger this server keeps (calls_since)."""
    if (settings := database.settings()) is None:
        return ledger.refused_per_day(state / ledger.FILE, day, limit)
    rows = _read(settings, _REFUSED, (day, limit + 1))
    return ([{"day": d, "citizen": c, "refused": n, "usd": round(float(usd or 0.0), 6)}
             for d, c, n, usd in reversed(rows[:limit])], len(rows) > limit)
