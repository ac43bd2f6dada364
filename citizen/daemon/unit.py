"""One wake the server's scheduler asked for, run as the citizen: `citizen-wake@NAME`
(`citizen run NAME --request FILE`; docs/architecture.md §7).

It is the daemon's work for one request, in a process that lives as long as the wake:
take the citizen's lock (never beside its own daemon or another wake), recover tasks,
remove the rings it was handed, take mail in, run the wake in a child from the citizen's
own code, record how it ended, roll back after three crashes in a row (the count kept in
the home, since no daemon remembers it), send the outbox, and the daily log sweep and
memory roll-up when due. The request is the scheduler's (systemd hands it over as the
unit's credential; no citizen can write it) and is read as data: checked field by field.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from citizen import civilization, config, mail
from citizen.config import paths
from citizen.daemon import ending, status
from citizen.daemon.process import Daemon
from citizen.daemon.requests import WakeRequest
from citizen.daemon.status import State
from citizen.errors import CitizenError
from citizen.home import quiesce, retention, state
from citizen.home.memory import Memory
from citizen.mail.intake import Intake
from citizen.mail.outbox import flush
from shared import clock, doorbell

log = logging.getLogger(__name__)

CRASHES = "unit_crashes"  # consecutive crashed wakes, kept across wake units
SWEPT = "unit_swept_at"  # when the daily log sweep last ran (world seconds)
MAX_REQUEST_BYTES = 65536
_TYPE = re.compile(r"[A-Z][A-Z_]{0,31}")


class BadRequest(CitizenError, ValueError):
    """The request file is not one the scheduler writes."""


def read_request(path: Path) -> dict[str, Any]:
    """The scheduler's request, checked: `type` (a wake type's name, or null for the
    slot's), `slot` (a number, or null), `reason` (text), `rings` (ring file names)."""
    raw = path.read_bytes()[:MAX_REQUEST_BYTES + 1]
    try:
        data = json.loads(raw) if len(raw) <= MAX_REQUEST_BYTES else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise BadRequest(f"{path}: not a scheduler's request (JSON object under 64 KB) - "
                         "the scheduler writes these; start the unit through it")
    kind, slot, reason, rings = (data.get("type"), data.get("slot"), data.get("reason", ""),
                                 data.get("rings", []))
    if kind is not None and not (isinstance(kind, str) and _TYPE.fullmatch(kind)):
        raise BadRequest(f"{path}: type {kind!r} is not a wake type's name")
    if slot is not None and not (isinstance(slot, int) and slot >= 0):
        raise BadRequest(f"{path}: slot {slot!r} is not a slot number")
    if kind is None and slot is None:
        raise BadRequest(f"{path}: neither a type nor a slot")
    if not isinstance(reason, str) or not isinstance(rings, list) \
            or not all(isinstance(r, str) for r in rings):
        raise BadRequest(f"{path}: reason must be text and rings a list of file names")
    return {"type": kind, "slot": slot, "reason": reason[:500], "rings": rings[:1000]}


def run_request(name: str, request_file: Path, *, wake_timeout_s: float = 1200.0) -> int:
    """Run the request as citizen `name`; 0 when the wake ended (idle included), 1 when
    it crashed."""
    req = read_request(request_file)
    home = paths.home(name)
    paths.require_owner(home)  # the citizen's own: root's files there would lock it out
    d = Daemon(name, wake_timeout_s=wake_timeout_s, first_wake_s=0)
    # systemd's stop (the operator's, the disk check's): the wake is asked to stop as a
    # daemon's second SIGTERM asks it (SIGTERM, its `finally` saves its contexts), not
    # killed with this process; one still waiting for its wake permit never starts.
    def stop(*_: object) -> None:
        d.cancel.set()
        d._stop_child()

    signal.signal(signal.SIGTERM, stop)
    d.acquire_lock()  # the citizen's one lock: not beside its own daemon, nor twice
    d.prepare()
    doorbell.consume(home.doorbell, req["rings"])
    d.crashes = int(state.load(home)["marks"].get(CRASHES, 0))
    with quiesce.working(name):  # a backup reads between wakes, never during one
        _take_mail(d)
        number, _ = state.allocate(home, scheduled=False)
        d._wake_process(WakeRequest(req["type"], req["reason"] or "scheduler"), number,
                        req["slot"])
        state.mark(home, CRASHES, d.crashes)
        _send_mail(d)
    ending.report_rollbacks(home)
    _daily(d)
    status.beat(home, name=name, state=State.SCHEDULED, current="", next_at=None,
                wakes_run=1)
    return 1 if d.crashes else 0


def _take_mail(d: Daemon) -> None:
    """Mail becomes tasks before the wake (no daemon polls between wakes here)."""
    if not mail.configured(config.load_secrets(d.name)):
        return
    d.mail.intake = Intake(d.home, d.config, mail.citizen_directory())
    try:
        for o in d.mail.intake.poll():
            log.info("mail %s: %s %s", o.message_id, o.action, o.detail)
    except mail.MailNotConfigured:  # the broker's answer: no mailbox, nothing to take in
        d.mail.intake = None
    except mail.MailError as exc:
        log.error("mail: %s (taken in at the next wake)", exc)


def _send_mail(d: Daemon) -> None:
    if d.mail.intake is None:
        return
    try:
        flush(d.home)
    except mail.MailError as exc:
        log.error("mail: the outbox waits for the next wake: %s", exc)


def _daily(d: Daemon) -> None:
    """The log sweep and weight diversity once a day; the memory roll-up when memories
    wait for one."""
    marks = state.load(d.home)["marks"]
    now = clock.epoch(clock.now())  # world time, as the sweep's days are
    if now - float(marks.get(SWEPT, 0)) >= 86400:
        retention.daily(d.name, d.home, d.config.logs)
        civilization.keep_diverse()  # once a world day, whichever citizen runs it first
        state.mark(d.home, SWEPT, now)
    if Memory(d.home.memory).pending():
        with quiesce.working(d.name):
            subprocess.run([sys.executable, "-m", "citizen", "memory", "rollup", d.name],
                           check=False, timeout=d.wake_timeout_s)
