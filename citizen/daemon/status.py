"""What a running daemon says about itself: its state, its process title (`ps`, `top`,
systemd's STATUS=) and its heartbeat file, which `citizen status`, the monitor and a
peer's PEER_MONITOR wake read."""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime
from enum import StrEnum
from typing import Any

import psutil

from citizen.admin.modes import HEARTBEAT_MODE
from citizen.config.paths import Home
from shared import clock
from shared.atomic import write_json

log = logging.getLogger(__name__)


class State(StrEnum):
    STARTING = "starting"
    SLEEPING = "sleeping"
    WAKING = "waking"
    # A wake with work waits for the broker's wake permit (daemon/turn.py): no process
    # yet; the heartbeat's `waiting` says for what ("for a wake permit (3 ahead)").
    WAITING = "waiting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"  # could not start: the heartbeat's `error` says why
    # Between wakes with no daemon: the server's scheduler keeps the schedule (its status
    # is in its own store, admin/schedstore.py); written by the wake unit at its end.
    SCHEDULED = "scheduled"


def title(name: str, state: State, current: str, next_at: datetime | None,
          waiting: str = "") -> str:
    """`citizen:opus waking #12 TASK`, `citizen:opus sleeping until 14:00:00`,
    `citizen:opus #12 TASK waiting for a wake permit (3 ahead)`, …"""
    if state == State.WAKING:
        return f"citizen:{name} waking {current}"
    if state == State.WAITING:
        return f"citizen:{name} {current} waiting {waiting}"
    if next_at:
        return f"citizen:{name} {state.value} until {next_at:%H:%M:%S}"
    return f"citizen:{name} {state.value}"


def set_title(text: str) -> None:
    """The process title, where setproctitle is installed."""
    try:
        import setproctitle  # noqa: PLC0415 - optional nicety: absent, the title stays

        setproctitle.setproctitle(text)
    except ImportError:
        pass


def beat(home: Home, *, name: str, state: State, current: str, next_at: datetime | None,
         wakes_run: int, doorbell: str = "", error: str = "", waiting: str = "") -> None:
    """Write the heartbeat; a failure is logged, never raised (the daemon goes on)."""
    data: dict[str, Any] = {
        "schema_version": 1, "citizen": name, "pid": os.getpid(),
        "state": state.value, "current_wake": current,
        "next_wake_at": next_at.isoformat() if next_at else None,
        "wakes_this_run": wakes_run,
        "doorbell": doorbell,  # "inotify", or "polling (why)" when the kernel gave none
        "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
        "updated": clock.now(time.time()),  # liveness: the wall clock, even when simulated
    }
    if error:
        data["error"] = error
    if waiting:
        data["waiting"] = waiting  # state `waiting`: for what (daemon/turn.py)
    try:
        write_json(home.heartbeat, data, mode=HEARTBEAT_MODE)  # why: citizen/admin/modes.py
    except OSError as exc:
        log.warning("heartbeat not written: %s", exc)
