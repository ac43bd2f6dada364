"""Every citizen's status, read from files only (never a model SDK): its daemon, last and next
wake, current task, wakes and dollars today against its cap, disk. `citizen status` prints it
and the web dashboard's civilization page shows it - the same facts from one function.

Root and the web user read here what each citizen can write (its heartbeat in the commons,
its logs, ledger and tasks), so every read is bounded and never blocks (shared/door.py), a
heartbeat counts only when its file is the citizen's own, and `statuses` reads the rows in
worker threads with a deadline: one citizen's broken or planted files make that citizen's
row say "unreadable" - never another's row wrong, never the command or the page hung.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from citizen import config
from citizen.admin import disk
from citizen.admin.schedstore import Store
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home import retention, spend, wakelog
from citizen.home.tasks import TaskQueue
from shared import clock, door
from shared.monitor import alive

RECENT_WAKES = 300  # more than a citizen wakes in a day
DISK_FRESH_S = 1800.0  # root's disk check (experience-disk.timer: every 10 min) counts this long
STALE_S = 120  # a heartbeat older than this (4 beats missed) means the daemon is not running
MAX_BEAT = 64 * 1024  # a heartbeat is a few hundred bytes: past this it is planted, not read
MAX_LEDGER = 16 * 2**20  # a day's spend ledger: ~500 bytes a call; past 16 MiB it is planted
# Every read here is bounded and non-blocking, so a row takes milliseconds; the deadline
# is for what no check foresaw (a file swapped for a FIFO between a check and a read in
# code outside this module): the command still answers, that row says it was not read.
ROWS_S = 20.0
ROW_WORKERS = 4  # rows read at once: a stuck row holds one worker, the others go on


class Unreadable(CitizenError, OSError):
    """A citizen's file that cannot be believed: not a plain file, too big, not JSON, or
    owned by someone else (a forgery)."""


@dataclass(frozen=True)
class Daemon:
    """What citizen NAME's heartbeat says of its daemon."""

    text: str  # "sleeping (pid 12)", "not running", "stale heartbeat (130 s old)", ...
    running: bool  # a live daemon whose heartbeat is fresh (or which is waking)
    next_wake: str | None
    waiting: str = ""  # a wake with work, no process yet: "for a wake permit (3 ahead)"


def daemon(home: paths.Home) -> Daemon:
    """Read citizen's heartbeat (and, between wake units, the server scheduler's status) -
    what `task add` needs to say whether it runs."""
    beat = _heartbeat(home)
    return beat if beat.running else (_scheduled(home.name) or beat)


def _scheduled(name: str) -> Daemon | None:
    """The scheduler's word on `name`, when a live scheduler keeps its schedule."""
    line = scheduler_line(name)
    if line is None:
        return None
    what = f"waking {line['current_wake']}" if line["state"] == "waking" else line["state"]
    return Daemon(f"scheduled: {what} (scheduler pid {line['pid']})", True,
                  line.get("next_wake_at"))


def scheduler_line(name: str) -> dict[str, Any] | None:
    """Citizen `name`'s line in a live scheduler's status (None: no live scheduler has it)."""
    data = _store(str(paths.civ_root()), os.environ.get("EXPERIENCE_SCHEDULER_DIR", "")).status()
    if not data or not alive(int(data.get("pid", 0))):
        return None
    line = data.get("citizens", {}).get(name)
    if not isinstance(line, dict):
        return None
    try:
        age = time.time() - clock.epoch(line.get("updated"))
    except ValueError:
        return None
    return {**line, "pid": data["pid"]} if age <= STALE_S or line.get("state") == "waking" \
        else None


@functools.lru_cache(maxsize=4)
def _store(root: str, here: str) -> Store:
    """The scheduler's store for this root (where it is takes a group lookup: once)."""
    return Store()


def owner_uid(home: paths.Home) -> int:
    """Who may write `home`'s files: the home's owner - on a server the citizen's own uid
    (onboarding gives it the home, and only root could change that), in dev mode the one
    user everyone runs as."""
    return os.lstat(home.dir).st_uid


def read_heartbeat(home: paths.Home) -> dict[str, Any] | None:
    """Citizen's heartbeat, believed only from its own file (None: it has none).

    :raises Unreadable: not a plain file (a FIFO, a link), too big, not a JSON object, or
        owned by another uid - a peer that made the file first (the commons' heartbeat
        folder is everyone's) could write in it what it likes.
    """
    path = home.heartbeat
    try:
        fh = door.open_plain(path, beneath=paths.shared_dir())
    except FileNotFoundError:
        return None
    except OSError as exc:  # a link, a FIFO, a folder swapped for a link on the way
        raise Unreadable(f"unreadable heartbeat ({exc.strerror or exc})") from exc
    with fh:
        owner = door.owner_of(fh)
        if owner != owner_uid(home):
            raise Unreadable(f"forged heartbeat - owned by uid {owner}, not {home.name}: "
                             f"not believed (root may remove {path})")
        raw = fh.read(MAX_BEAT + 1)
    if len(raw) > MAX_BEAT:
        raise Unreadable(f"unreadable heartbeat (over {MAX_BEAT} bytes)")
    try:
        beat = door.loads(raw)
    except ValueError as exc:
        raise Unreadable(f"unreadable heartbeat ({exc})") from exc
    if not isinstance(beat, dict):
        raise Unreadable("unreadable heartbeat (not a JSON object)")
    return beat


def _heartbeat(home: paths.Home) -> Daemon:
    try:
        beat = read_heartbeat(home)
    except Unreadable as exc:
        return Daemon(str(exc), False, None)
    if beat is None:
        return Daemon("not running", False, None)
    return _said(beat)


def _said(beat: dict[str, Any]) -> Daemon:
    """What a heartbeat the citizen wrote itself says of its daemon."""
    try:
        age = datetime.now(UTC) - datetime.fromisoformat(beat["updated"])
        if beat["state"] == "failed":  # the daemon's last words: why it could not start
            return Daemon(f"failed to start: {beat.get('error', '?')}", False, None)
        if beat["state"] == "stopped" or not alive(int(beat["pid"])):
            return Daemon("not running", False, None)
        # Waking or waiting (for a wake permit, in a wake unit that beats only when its
        # place moves): a live pid is enough.
        if age.total_seconds() > STALE_S and beat["state"] not in ("waking", "waiting"):
            return Daemon(f"stale heartbeat ({int(age.total_seconds())} s old)", False, None)
        polled = ", doorbell polled" if beat.get("doorbell", "inotify") != "inotify" else ""
        # "waiting for a wake permit (3 ahead)": a wake with work, no process yet.
        what = str(beat.get("waiting"))[:120] if beat["state"] == "waiting" else ""
        return Daemon(f"{beat['state']}{' ' + what if what else ''} (pid {beat['pid']}"
                      f"{polled})", True, beat.get("next_wake_at"), what)
    except (ValueError, KeyError, TypeError, OverflowError, OSError) as exc:
        return Daemon(f"unreadable heartbeat ({exc})", False, None)


def _ledger_problem(home: paths.Home) -> str | None:
    """Why today's spend ledger is not summed (None: it may be). `spend` reads it whole
    and by name, so only a plain file of sane size is handed to it."""
    try:
        with door.open_plain(spend.ledger(home, spend.today())) as fh:
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"spend ledger unreadable ({exc.strerror or exc})"
    if size > MAX_LEDGER:
        return f"spend ledger unreadable ({size} bytes, over {MAX_LEDGER}: not a ledger)"
    return None


def citizen_status(name: str, *, measure_disk: bool = True) -> dict[str, Any]:
    """Daemon state, last and next wake, current task, wakes and dollars today, disk.

    Read for a thousand citizens at a time, so a row costs a few stats and small reads:
    only the ends of the last log and the first line of few others (`wakes_on`), only
    the budget of the config (`config.load_budget`), and the disk from root's last
    check (`citizen.admin.disk`) while it is fresh, else - with `measure_disk`, which
    a view without the figure leaves off - by walking the home (`disk_mb` None when not).
    """
    home = paths.home(name)
    beat = daemon(home)
    logs = wakelog.wake_logs(home)
    last = wakelog.summary(logs[-1]) if logs else None
    idle = (scheduler_line(name) or {}).get("last")  # the scheduler logs idle wakes itself
    if isinstance(idle, dict) and idle.get("ts") and (
            last is None or clock.epoch(idle["ts"]) > clock.epoch(last.get("started"))):
        last = {"wake": None, "type": idle.get("type"), "status": idle.get("status"),
                "started": idle["ts"]}
    problems: list[str] = []
    if beat.text.startswith(("unreadable", "forged")):
        problems.append(beat.text)
    tasks = TaskQueue(home.tasks)
    try:
        active, counts = tasks.active(), tasks.counts()
    except (OSError, ValueError, RecursionError) as exc:  # the citizen's own task files
        active, counts = None, {"queue": 0}
        problems.append(f"tasks unreadable ({exc})")
    ledger = _ledger_problem(home)
    if ledger:
        problems.append(ledger)
    usd_today = 0.0 if ledger else spend.spent(home, spend.today())  # every call, in wakes or not
    try:
        cap = config.load_budget(name).max_usd_per_day
    except CitizenError:
        cap = None
    verdict = disk.last(name)
    used_mb, measured_at = _disk_used(home, verdict, measure_disk)
    return {
        "citizen": name, "daemon": beat.text, "next_wake": beat.next_wake,
        "waiting": beat.waiting or None,  # for what its wake with work waits (a permit)
        "last_wake": last and {k: last[k] for k in ("wake", "type", "status", "started")},
        "current_task": active and {"id": active.id, "text": active.text[:120]},
        "tasks": counts,
        "wakes_today": wakes_on(logs, spend.today()),
        "usd_today": round(usd_today, 6),
        "usd_per_day_cap": cap,
        "daily_cap_reached": cap is not None and usd_today >= cap,
        "disk_mb": used_mb,  # logs are bounded (issue 18)
        "disk_measured_at": measured_at,
        "disk_budget": _disk(verdict),
        "problems": problems,  # what of this row could not be read, and why
        "unreadable": None,  # the whole row could not be read: why (`unreadable_row`)
    }


def unreadable_row(name: str, why: str) -> dict[str, Any]:
    """Citizen `name`'s row when its files could not be read at all: `why`, and nothing
    that looks like a figure."""
    return {"citizen": name, "daemon": f"unreadable: {why}", "next_wake": None, "waiting": None,
            "last_wake": None, "current_task": None, "tasks": {"queue": 0},
            "wakes_today": 0, "usd_today": 0.0, "usd_per_day_cap": None,
            "daily_cap_reached": False, "disk_mb": None, "disk_measured_at": None,
            "disk_budget": None, "problems": [why], "unreadable": why}


def statuses(names: Iterable[str], row: Callable[[str], dict[str, Any]],
             deadline_s: float = ROWS_S) -> list[dict[str, Any]]:
    """`row(name)` for each of `names`, in order, read by ROW_WORKERS daemon threads: a
    row that raises, or is not read within `deadline_s` in all, is `unreadable_row` - the
    others are still shown, and the caller returns (a thread stuck on a planted file is
    a daemon thread: it keeps no process alive)."""
    names = list(names)
    todo = list(reversed(names))
    done: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                name = todo.pop()
            try:
                done[name] = row(name)
            # Whatever a citizen's files make a reader raise (RecursionError, MemoryError
            # and our own bugs included) stays on its row, named; every other row is read.
            except Exception as exc:  # noqa: BLE001
                done[name] = unreadable_row(name, f"{type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=work, name="status-row", daemon=True)
               for _ in range(min(ROW_WORKERS, len(names)))]
    for worker in workers:
        worker.start()
    end = time.monotonic() + deadline_s
    for worker in workers:
        worker.join(max(0.0, end - time.monotonic()))
    late = f"not read within {deadline_s:.0f} s - a file of its may block its readers"
    return [done.get(n) or unreadable_row(n, late) for n in names]


def wakes_on(logs: list[Path], day: date) -> int:
    """How many of a citizen's wake `logs` (oldest first) started on world `day`.

    Wake numbers are taken in order (`home.state.allocate`), so a wake started after
    every older one. The scan goes from the newest log back and stops at the first last
    written before `day` began: that wake started before it, and so did every older one.
    Of the logs written since, only a wake that began the day before can have run past
    midnight - the oldest ones: their first lines are read until one started on `day`.
    """
    midnight = datetime.combine(day, datetime.min.time(), UTC).timestamp()
    wall, world, speed = time.time(), clock.time(), clock.speed()
    since: list[Path] = []
    for path in reversed(logs[-RECENT_WAKES:]):
        try:
            mtime = path.stat().st_mtime
        except OSError:  # swept meanwhile
            continue
        # A compressed log is dated (world time) when its wake ended (home.retention);
        # a plain one was last written at wall time `mtime`.
        written = mtime if path.name.endswith(".gz") else world - (wall - mtime) * speed
        if written < midnight:
            break
        since.append(path)
    count = len(since)
    for path in reversed(since):  # the oldest first
        if str(wakelog.first_event(path).get("ts", ""))[:10] == day.isoformat():
            break
        count -= 1
    return count


def _disk_used(home: paths.Home, verdict: disk.Verdict | None,
               measure: bool) -> tuple[float | None, str | None]:
    """The home's MB and when they were measured: root's last check while fresh (the
    timer measures every home every 10 minutes), else walked now if `measure`."""
    if verdict is not None and verdict.used_mb is not None:
        try:
            if clock.time() - clock.epoch(verdict.checked_at) < DISK_FRESH_S:
                return verdict.used_mb, verdict.checked_at
        except (TypeError, ValueError):  # an unreadable time: measured again, as if old
            pass
    if not measure:
        return None, None
    return round(retention.disk_bytes(home) / 2**20, 1), clock.now()


def _disk(verdict: disk.Verdict | None) -> dict[str, Any] | None:
    """Root's last disk check of this citizen (citizen.admin.disk), when it is past or near
    its budget or was stopped for it."""
    if verdict is None or (verdict.state == "ok" and not verdict.stopped_at):
        return None
    return {"state": verdict.state, "used_mb": verdict.used_mb,
            "budget_mb": verdict.budget_mb, "checked_at": verdict.checked_at,
            "stopped_at": verdict.stopped_at}
