"""Money per UTC day: a ledger line for every model call, and the daily caps.

Every metered call (`citizen.wake.meter.Meter`) appends one line to `logs/spend/<day>.jsonl`:
the wake (roll-ups and `citizen ask` get a wake number and type of their own), purpose,
tier, model, tokens and dollars (`citizen doctor`'s one test call is not metered). A
day's total is the sum of its lines, so the caps, `citizen status` and `citizen cost`
read one small file per citizen instead of every wake log.

Caps (budget keys the operator owns on a server): `max_usd_per_day` for the citizen and
`civilization_usd_per_day` for every citizen together. Before each call the meter asks
`Daily.check(worst)`: a call whose worst case could cross a cap is not made
(`DailyCapReached`) - the wake ends `daily_cap`, a task it held waits for tomorrow
instead of failing, and until the day turns only wakes that call no model run. At 80 %
of its own cap the citizen tells its operators (mail.allowed_senders) once that day.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from citizen.config.paths import Home
from citizen.errors import LimitReached, ProviderError
from shared import clock, door
from shared.atomic import append_line

log = logging.getLogger(__name__)
MAX_CALL_USD = 100.0  # no call costs more (the wake cap's own maximum)
LEAST_CALL_USD = 1e-6  # a wake with work starts only if at least this much is left
WARN_SHARE = 0.8  # of the citizen's daily cap: the operators hear of it once that day


class DailyCapReached(LimitReached, ProviderError):
    """The next call could cross a daily cap; it was not made."""


def today() -> date:
    return clock.today()


def ledger(home: Home, day: date) -> Path:
    """The day's ledger of `home`: built once per process (the meter asks for its own and
    every peer's several times a call - path joins were most of a ledger check)."""
    key = (home.dir, day)
    path = _LEDGERS.get(key)
    if path is None:
        if len(_LEDGERS) >= _SUMMED_MAX:
            _LEDGERS.clear()  # a long-lived process (the dashboard) reads many days
        path = _LEDGERS[key] = home.dir / "logs" / "spend" / f"{day.isoformat()}.jsonl"
    return path


# (home directory, day) -> its ledger's path
_LEDGERS: dict[tuple[Path, date], Path] = {}


def record(home: Home, **line: Any) -> None:
    """One call's spending (the ledger is append-only, one JSON object per line)."""
    append_line(ledger(home, today()), {"ts": clock.now(), **line})


def lines(home: Home, day: date) -> list[dict[str, Any]]:
    """The day's ledger; a torn last line (a crash mid-append) is skipped, not fatal."""
    path = ledger(home, day)
    try:  # its end at most: a sparse terabyte planted as a ledger fills no reader
        raw = door.read_tail(path, MAX_LEDGER)
    except FileNotFoundError:
        return []
    except OSError as exc:  # a peer's ledger we may not read (or a FIFO, a link): nothing
        log.warning("cannot read %s (%s): its spending is not counted", path, exc)
        return []
    out = []
    for text in raw.decode("utf-8", "replace").splitlines():
        try:
            line = door.loads(text)
        except ValueError:
            log.warning("%s: a line that does not parse is skipped", path)
            continue
        if isinstance(line, dict):  # anything else is no ledger line
            out.append(line)
    return out


def spent(home: Home, day: date) -> float:
    """The day's dollars; a line that is no sane cost (not a number, negative, NaN, more
    than any call can cost) counts as nothing or as that most, never as an error.

    A ledger is append-only: what was summed is remembered (per process) with the byte
    it reached, and only lines appended since are read - the meter asks before and after
    every call, for itself and every peer, and a peer's ledger that did not change costs
    one stat. A file replaced (another inode), shorter than that byte, or changed without
    growing (its mtime) is read again from the start."""
    path = ledger(home, day)
    try:
        info = path.stat()
    except FileNotFoundError:
        return 0.0
    except OSError as exc:
        log.warning("cannot read %s (%s): its spending is not counted", path, exc.strerror)
        return 0.0
    ino, mtime, offset, total = _SUMMED.get(path, (info.st_ino, info.st_mtime_ns, 0, 0.0))
    if info.st_size == offset and mtime == info.st_mtime_ns and ino == info.st_ino:
        return total
    if ino != info.st_ino or info.st_size <= offset:
        offset, total = 0, 0.0
    if info.st_size - offset > MAX_LEDGER:  # no day of calls writes this much: a planted
        log.warning("%s grew by %d bytes: only its last %d are summed", path,  # giant
                    info.st_size - offset, MAX_LEDGER)
        offset = info.st_size - MAX_LEDGER
    try:  # through the door: never a link's target, never stuck on a FIFO
        with door.open_plain(path) as fh:
            fh.seek(offset)
            raw = fh.read(min(info.st_size - offset, MAX_LEDGER))
    except OSError as exc:  # a peer's ledger we may not read: counted as nothing, said
        log.warning("cannot read %s (%s): its spending is not counted", path, exc)
        return 0.0
    whole = raw[:raw.rfind(b"\n") + 1]  # a last line still being written waits
    for text in whole.decode("utf-8", "replace").splitlines():
        try:
            line = door.loads(text)
        except ValueError:
            log.warning("%s: a line that does not parse is skipped", path)
            continue
        total += _cost(line)
    if len(_SUMMED) >= _SUMMED_MAX:
        _SUMMED.clear()  # a long-lived process (the dashboard) reads many days' ledgers
    _SUMMED[path] = (info.st_ino, info.st_mtime_ns, offset + len(whole), total)
    return total


# A day's ledger is a few hundred bytes a call: 16 MiB is tens of thousands of calls.
MAX_LEDGER = 16 * 1024 * 1024
# ledger -> (inode, mtime_ns, bytes summed, dollars)
_SUMMED: dict[Path, tuple[int, int, int, float]] = {}
_SUMMED_MAX = 8192


def _cost(line: Any) -> float:
    cost = line.get("cost_usd", 0.0) if isinstance(line, dict) else 0.0
    try:
        value = float(cost)
    except (TypeError, ValueError):
        return 0.0
    return min(value, MAX_CALL_USD) if math.isfinite(value) and value > 0 else 0.0


def _count(value: Any) -> int:
    """A token count from a ledger line a citizen wrote: a sane whole number, else 0."""
    return value if isinstance(value, int) and 0 <= value < 10**9 else 0


def days(n: int) -> list[date]:
    """The last n UTC days, oldest first."""
    end = today()
    return [end - timedelta(days=i) for i in range(n - 1, -1, -1)]


TOKENS = ("tokens_in", "tokens_out", "cache_read", "cache_write")


def totals(homes: Iterable[Home], n_days: int, by: tuple[str, ...]) -> list[dict[str, Any]]:
    """The ledgers of `homes` over the last `n_days`, one row per group of `by` (any of
    citizen, day, wake_type, model, purpose): dollars, calls, tokens, the prompt tokens an
    average call carries and the cached share of prompt tokens (`citizen cost`, the
    dashboard's Money page)."""
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for home in homes:
        for day in days(n_days):
            for line in lines(home, day):
                fields = {"citizen": home.name, "day": day.isoformat()}
                key = tuple(fields.get(b) or str(line.get(b, "?")) for b in by)
                row = rows.setdefault(key, {"usd": 0.0, "calls": 0, **dict.fromkeys(TOKENS, 0)})
                row["usd"] += _cost(line)  # a line that lies counts as nothing, not an error
                row["calls"] += 1
                for f in TOKENS:
                    row[f] += _count(line.get(f, 0))
    out = []
    for key in sorted(rows):
        row = rows[key]
        prompt = row["tokens_in"] + row["cache_read"] + row["cache_write"]
        out.append({**dict(zip(by, key, strict=True)), **row, "usd": round(row["usd"], 6),
                    # what a call carries on average: the figure that must plateau
                    "prompt_per_call": round(prompt / row["calls"]) if row["calls"] else 0,
                    "cached_share": round(row["cache_read"] / prompt, 3) if prompt else 0.0})
    return out


@dataclass
class Daily:
    """The daily caps as one citizen's meter checks them."""

    home: Home
    citizen_cap: float
    civilization_cap: float
    peers: Iterable[Home] = ()  # every other citizen, for the civilization's total
    warn: Callable[[str], None] = field(default=lambda message: None)
    # The peers' spend today as the first check read it: summed once a meter (a wake),
    # not once a call - one stat per peer per call grew each call's cost with the
    # headcount (6 ms a call at 1,000 citizens). The broker, whose ledger is the
    # authority, checks every call against the civilization's cap as it is now.
    _peers_spent: tuple[date, float] | None = field(default=None, init=False, repr=False)
    # The civilization's spend today from the broker's ledger (None: no broker answers):
    # one question for that first check instead of reading every peer's ledger, which a
    # fresh wake process reads whole (206 ms at 1,000 citizens, bench/cap_check.py).
    civilization: Callable[[], float | None] | None = None

    def check(self, worst: float) -> None:
        """:raises DailyCapReached: `worst` more could cross the citizen's or the
        civilization's cap today."""
        day = today()
        mine = spent(self.home, day)
        if mine + worst > self.citizen_cap:
            raise DailyCapReached(
                f"the next call could cost ${worst:.4f} and ${mine:.4f} of {self.home.name}'s "
                f"${self.citizen_cap:.2f} daily cap is spent - work resumes after 00:00 UTC "
                "(budget.max_usd_per_day)")
        # A peer counts at most one citizen's day: a ledger that lies (a citizen's own
        # file) cannot stop the whole civilization, only use up one share of it.
        if self._peers_spent is None or self._peers_spent[0] != day:
            total = self.civilization() if self.civilization is not None else None
            self._peers_spent = (day, max(0.0, total - mine) if total is not None else
                                 sum(min(spent(p, day), self.citizen_cap) for p in self.peers))
        everyone = mine + self._peers_spent[1]
        if everyone + worst > self.civilization_cap:
            raise DailyCapReached(
                f"the next call could cost ${worst:.4f} and ${everyone:.4f} of the "
                f"civilization's ${self.civilization_cap:.2f} daily cap is spent - work "
                "resumes after 00:00 UTC (budget.civilization_usd_per_day)")

    def spent_now(self) -> None:
        """After a call is recorded: at 80 % of the cap, spent for real, tell the operators
        (once a day)."""
        day = today()
        if self._marker(day).exists():  # told already today: no need to read the ledger
            return
        mine = spent(self.home, day)
        if mine >= WARN_SHARE * self.citizen_cap:
            self._warn_once(day, mine)

    def _marker(self, day: date) -> Path:
        return ledger(self.home, day).with_suffix(".warned")

    def _warn_once(self, day: date, amount: float) -> None:
        marker = self._marker(day)
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            with marker.open("x"):  # O_EXCL: one warning a day, whoever gets here first
                pass
        except FileExistsError:
            return
        self.warn(f"{self.home.name} has spent ${amount:.2f} of its "
                  f"${self.citizen_cap:.2f} daily model budget today ({day.isoformat()}); "
                  "at the cap it stops calling the model until 00:00 UTC.")


def started(home: Home, kind: str, day: date | None = None) -> int:
    """How many `kind`s ("debate", "proposal") the citizen opened on `day` (today)."""
    path = ledger(home, day or today()).with_suffix(f".{kind}s")
    try:
        return len(path.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0


def allow(home: Home, kind: str, cap: int) -> None:
    """:raises CapReached: the day's `cap` of `kind`s ("debate", "proposal") is used up."""
    if started(home, kind) >= cap:
        raise CapReached(f"you have opened {cap} {kind}s today, the most a day allows "
                         f"(budget.max_{kind}s_per_day); try again after 00:00 UTC")


def opened(home: Home, kind: str, what: str) -> None:
    """Count one more `kind` opened today (after it was opened: a refused one is free)."""
    path = ledger(home, today()).with_suffix(f".{kind}s")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(what.replace("\n", " ")[:200] + "\n")


class CapReached(LimitReached):
    """A per-day limit on work a citizen may start is used up."""
