"""How a wake process ends: stopped (SIGTERM, then SIGKILL), read from the log it leaves
(a line for the journal; for a process that died before its last event, that event
written for it), and what follows (last-known-good kept, a rollback after three crashes)."""

from __future__ import annotations

import logging
import signal
import subprocess

from citizen.civilization import commons
from citizen.config.paths import Home
from citizen.home import rollback, wakelog
from citizen.home.tasks import now_iso
from shared.atomic import append_line

log = logging.getLogger(__name__)

KILL_GRACE_S = 5


def record(home: Home, number: int, code: int, duration: float) -> bool:
    """Log how wake `number` ended; True when it crashed (died, or our code raised)."""
    logs = sorted(home.wake_logs.glob(f"{number:06d}-*.jsonl"))
    events = wakelog.read(logs[0]) if logs else []
    end = next((e for e in reversed(events) if e.get("event") == "wake_end"), None)
    if end is None:
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if logs:
            append_line(logs[0], {"ts": now_iso(), "wake": number, "event": "wake_end",
                                  "status": "crashed", "reason": how,
                                  "duration_s": round(duration, 3)})
        log.error("wake %d: the wake process %s without finishing its log", number, how)
        return True
    log.info("wake %d %s: %s in %.1f s ($%.4f, %s calls)%s", number,
             logs[0].stem.split("-", 1)[1], end.get("status"), duration,
             end.get("cost_usd", 0.0), end.get("calls", 0),
             f" - {end['reason']}" if end.get("reason") else "")
    return any(e.get("event") == "error" for e in events)


def after(home: Home, crashed: bool, commit: str | None, crashes: int) -> int:
    """Keep last-known-good current; after three crashes in a row, roll back. The
    consecutive crashes now."""
    if not crashed:
        if commit:
            rollback.record_good(home, commit)
        return 0
    crashes += 1
    if crashes < rollback.CRASHES_BEFORE_ROLLBACK:
        return crashes
    if rollback.roll_back(home, f"{crashes} wakes in a row crashed"):
        report_rollbacks(home)
    return 0


def report_rollbacks(home: Home) -> None:
    """File `failed` for what a rollback reverted (the start guard's, or the daemon's)."""
    if not rollback.unreported(home):
        return
    filed = rollback.report_rollbacks(home, commons().evolution)
    log.error("rolled back; filed 'failed' for %s", ", ".join(filed) or "no announced change")


def stop(child: subprocess.Popen[bytes] | None) -> None:
    """Stop a wake process: SIGTERM first (it stops its sandboxed commands, and its
    `finally` still saves its contexts), SIGKILL after the grace (its sandboxes die with
    it: bubblewrap's --die-with-parent). Signalled alone, not as a group: the wake shares
    the daemon's process group (process.py says why)."""
    if child is None or child.poll() is not None:
        return
    try:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
    except ProcessLookupError:
        pass
