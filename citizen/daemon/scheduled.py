"""One citizen as the server's scheduler holds it (docs/architecture.md §7).

The scheduler (`experience-scheduler.service`, `citizen run --all` as its own user) keeps
every citizen's schedule in one process; a `Scheduled` is one citizen's part of it: its
slots, its doorbell, its gate, and the start of its wake unit when there is work. It
writes nothing in the home: the slot counter, the idle wakes and the status are the
scheduler's (admin/schedstore.py); the rings stay where they are until the wake unit,
running as the citizen, removes the ones it was handed. What the scheduler reads in a
home - config, tasks, contexts, rings, code - is data: a link planted there is never
followed to write, and never followed at all where it could point into the scheduler's
own files (the doorbell; the code, compared byte for byte).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from citizen.admin import disk
from citizen.admin.schedstore import Store
from citizen.daemon import process
from citizen.daemon.instance import AlreadyRunning
from citizen.daemon.process import Daemon
from citizen.daemon.requests import WakeRequest
from citizen.daemon.status import State
from citizen.home import state
from citizen.wake import types as wakes
from citizen.wake.flow import gate_only
from shared import clock, doorbell
from shared.locks import holders

log = logging.getLogger(__name__)

Starter = Callable[[str, Path, float], int]  # (citizen, request file, deadline) -> exit code
MAIL = "mail: "  # the reason of a wake for new mail (Scheduler._mail)
CODE = ("citizen", "shared")  # the packages whose code decides a gate
RELEASE = Path(process.__file__).resolve().parents[2]  # the code this scheduler runs
# A gate reads a few files in ~2 ms; one still running after this waits on something a
# citizen planted (a FIFO opened with no writer): its worker is freed, the unit decides.
GATE_S = 30.0
# The rings one request hands over: read_request takes 64 KB, and a peer may flood a
# doorbell with long names - more would fail the victim's wake (the rest wait their turn).
MAX_HANDED, MAX_RING_NAME = 200, 128


def systemd_starter(name: str, request: Path, deadline_s: float) -> int:
    """Start `citizen-wake@NAME.service` and wait for it to end (a polkit rule lets this
    user start those units and nothing else); systemd runs it as the citizen. Starting a
    unit that runs already joins it: systemd coalesces."""
    unit = f"citizen-wake@{name}.service"
    try:
        return subprocess.run(["systemctl", "start", unit], check=False,
                              timeout=deadline_s + 120).returncode
    except subprocess.TimeoutExpired:
        subprocess.run(["systemctl", "stop", "--no-block", unit], check=False)
        return -9


def process_starter(name: str, request: Path, deadline_s: float) -> int:
    """Dev mode's stand-in for the unit (`citizen run --all --scheduler`): the same
    one-shot, `citizen run NAME --request FILE`, as a child."""
    args = [sys.executable, "-m", "citizen", "run", name, "--request", str(request)]
    try:
        return subprocess.run(args, check=False, timeout=deadline_s + 120).returncode
    except subprocess.TimeoutExpired:
        return -9


class Scheduled(Daemon):
    """Citizen `name`'s schedule, rings and gate, kept by the scheduler."""

    def __init__(self, name: str, *, store: Store, starter: Starter, **kw: Any) -> None:
        super().__init__(name, **kw)
        self.store, self.starter = store, starter
        self.owner = self.home.dir.stat().st_uid  # the kernel's word for whose home it is
        self.rings: dict[str | None, list[str]] = {}  # ring files handed to the next wake
        self.seen: set[str] = set()  # ring files already asked for
        self.last: dict[str, Any] | None = None  # the last wake, for the status
        self.code = SameCode(self.home.code)
        self.gate_stuck = False  # a gate here overran GATE_S: the unit gates from now on

    # ------------------------------------------------------------ lifecycle

    def acquire_lock(self) -> None:
        """No lock of ours in the home; a citizen whose own daemon runs is left out."""
        if self.own_daemon_runs():
            raise AlreadyRunning(f"citizen {self.name} runs its own daemon (citizen@"
                                 f"{self.name}); the scheduler leaves it out")

    def prepare(self) -> None:
        doorbell.peek(self.home.doorbell, self.owner)  # a folder we can watch and read

    def begin(self) -> None:
        self._enqueue_rings()  # rung while nobody listened
        self._set_state(State.SLEEPING)

    def _schedule(self) -> None:
        self._schedule_slots()  # its only job: the rest is its wake unit's

    # ------------------------------------------------------------ rings

    def _enqueue_rings(self) -> None:
        try:
            rings = doorbell.peek(self.home.doorbell, self.owner)
        except OSError as exc:
            log.error("citizen %s: doorbell not read: %s", self.name, exc)
            return
        present = {r.path.name for r in rings}
        self.seen &= present  # consumed by a wake: forgotten
        known = set(wakes.registered())
        for r in rings:
            # A type no module registers is no wake: else each of a peer's invented types
            # is a request of its own and a deferred job in the one scheduler.
            if r.path.name in self.seen or r.wake_type not in known:
                continue
            self.seen.add(r.path.name)
            self.rings.setdefault(r.wake_type, []).append(r.path.name)
            log.info("doorbell: %s wake for %s (from %s)", r.wake_type, r.reason, r.sender)
            self._request(r.wake_type, f"doorbell: {r.reason}")

    def far_ring(self, wake_type: str, reason: str, sender: str) -> bool:
        """A ring from a citizen on another server (the broker heard it, the scheduler
        asked): a wake requested as for a doorbell file - if its type is one; whether."""
        if wake_type not in set(wakes.registered()):
            log.warning("citizen %s: a ring of no wake type (%.40r, from %s) ignored",
                        self.name, wake_type, sender)
            return False
        log.info("doorbell: %s wake for %s (from %s, another server)", wake_type, reason,
                 sender)
        self._request(wake_type, f"doorbell: {reason}")
        return True

    # ------------------------------------------------------------ wakes

    def _run_wake(self, req: WakeRequest) -> None:
        if self.own_daemon_runs():
            log.warning("citizen %s: its own daemon runs; no wake from the scheduler", self.name)
            return
        slot = self.store.next_slot(self.name) if req.wake_type is None else None
        # New mail: the wake takes it in first, so no gate here could see its task.
        if not req.reason.startswith(MAIL) and self._idle_here(req, 0, slot):
            return
        with self.processes or contextlib.nullcontext():  # at most `parallel` units
            self._start_unit(req, slot)

    def _idle_here(self, req: WakeRequest, number: int, slot: int | None) -> bool:
        """The gate, here, when the citizen's code is this release's (else its own gate,
        in its wake, decides); an idle wake is logged in the scheduler's store. A citizen
        that never woke has its first wake in its unit, which writes its heartbeat - else
        its peers' PEER_MONITOR would find it dead, never having run."""
        if self.gate_stuck or not self.code.is_release() or not self.home.heartbeat.exists():
            return False
        started = time.monotonic()

        def gate() -> tuple[str, str, str] | None:
            number = int(state.load(self.home)["wakes"]) + 1  # read: the wake it would be
            return gate_only(self.name, number=number, slot=slot, wake_type=req.wake_type)

        try:
            verdict = _within(GATE_S, gate)
        except TimeoutError:
            # Its thread stays blocked (a thread cannot be killed), so never again here.
            self.gate_stuck = True
            log.error("the gate did not end in %.0f s here (a FIFO or a huge file in this "
                      "citizen's home or a peer's?); its wake units gate from now on - find "
                      "it with `find /home/%s -type p`, restart the scheduler", GATE_S,
                      self.name)
            return False
        except Exception as exc:  # noqa: BLE001 - the wake unit runs the gate again, as the citizen
            log.warning("the gate failed here (%s: %s); the wake unit decides",
                        type(exc).__name__, exc)
            return False
        if verdict is None:
            return False
        wake_type, how, why = verdict
        self.last = {"ts": clock.now(), "type": wake_type, "slot": slot, "status": how,
                     "reason": why, "request": req.reason,
                     "duration_s": round(time.monotonic() - started, 4)}
        self.store.log_idle(self.name, self.last)
        self.wakes_run += 1
        log.info("%s %s: %s in the scheduler - %s", wake_type, f"slot {slot}" if slot is not None
                 else req.reason, how, why)
        return True

    def _start_unit(self, req: WakeRequest, slot: int | None) -> None:
        held = disk.last(self.name)
        if held is not None and held.stopped_at and held.state in disk.ENFORCED:
            # Root's disk check stopped it: no wake until a check finds it within budget.
            log.warning("past its disk budget (%s MB of %d): no wake - free space or raise "
                        "budget.max_home_mb; the next check lets it wake", held.used_mb,
                        held.budget_mb)
            return
        waiting = [r for r in self.rings.pop(req.wake_type, []) if len(r) <= MAX_RING_NAME]
        handed = waiting[:MAX_HANDED]  # the request stays under read_request's 64 KB
        if waiting[MAX_HANDED:]:
            self.rings[req.wake_type] = waiting[MAX_HANDED:]
        path = self.store.write_request(self.name, {
            "type": req.wake_type, "slot": slot, "reason": req.reason, "rings": handed})
        self.current = req.wake_type or f"slot {slot}"
        self._set_state(State.WAKING)
        log.info("%s: its wake unit starts (%s)", self.current, req.reason)
        code = self.starter(self.name, path, self.wake_timeout_s)
        self.wakes_run += 1
        self.last = {"ts": clock.now(), "type": req.wake_type, "slot": slot,
                     "status": "ran" if code == 0 else f"unit failed ({code})"}
        if code != 0:  # rings it may not have taken: asked for again at the next ring
            self.seen -= set(handed)
        (log.info if code == 0 else log.error)("%s: the wake unit ended with %d", self.current,
                                               code)
        self.current = ""
        if self.state != State.STOPPING:
            self._set_state(State.SLEEPING)

    def own_daemon_runs(self) -> bool:
        """Whether citizen@NAME runs (its lock held by its daemon). On a server the lock
        may be its own wake unit's instead - one the scheduler started before a restart -
        so systemd is asked which unit runs; in dev mode the holder is its daemon."""
        if not lock_held(self.home.daemon_lock):
            return False
        if self.starter is not systemd_starter:
            return True
        unit = f"citizen@{self.name}.service"
        return subprocess.run(["systemctl", "is-active", "--quiet", unit],
                              check=False).returncode == 0

    def _stop_child(self) -> None:
        pass  # systemd stops the unit (the scheduler's stop does not stop a wake)

    # ------------------------------------------------------------ status

    def _set_state(self, new: State, waiting: str = "") -> None:
        self.state = new  # its wake unit, as the citizen, waits for the permit

    def _heartbeat(self) -> None:
        pass  # the scheduler writes one status for all (Scheduler._beat)

    def line(self) -> dict[str, Any]:
        """This citizen's line in the scheduler's status."""
        nxt = self._next_wake()
        return {"state": self.state.value, "current_wake": self.current,
                "next_wake_at": nxt.isoformat() if nxt else None,
                "wakes_this_run": self.wakes_run, "last": self.last,
                "updated": clock.now(time.time())}  # liveness: the wall clock, as a heartbeat


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """`fn()` run in a thread of its own, waited for `seconds` at most.

    :raises TimeoutError: still running (it is left to end, or not, on its own)."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except Exception as exc:  # noqa: BLE001 - raised again in the caller's thread
            box.append((False, exc))

    thread = threading.Thread(target=run, name=f"{threading.current_thread().name}:gate",
                              daemon=True)
    thread.start()
    thread.join(seconds)
    if not box:
        raise TimeoutError(f"still running after {seconds:.0f} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def lock_held(lock: Path) -> bool:
    """Whether someone holds the citizen's daemon lock (shared.locks.holders: read from
    /proc/locks, device and inode, without taking it)."""
    try:
        return bool(holders(lock.lstat()))
    except OSError:
        return False


class SameCode:
    """Whether a citizen's code (its `citizen` and `shared` packages) is byte for byte
    the release's - the condition for its gate to run in the scheduler, from the
    release's code. Decided again only when a file's size or time changed; links and
    anything that is not a regular file count as different."""

    def __init__(self, code: Path) -> None:
        self.code = code
        self.key: frozenset[tuple[str, int, int]] | None = None
        self.same = False

    def is_release(self) -> bool:
        marker = self.code / "citizen" / "__init__.py"
        if not marker.exists() and not marker.is_symlink():
            return True  # no code of its own: its wakes run the release (process.py)
        _release()
        key = _listing(self.code, _SIZES, _DIRS)
        if key is None:
            return False
        if key != self.key:
            self.key, self.same = key, _digests(self.code, key) == _release()
        return self.same


_RELEASE: dict[str, str] = {}
_SIZES: dict[str, int] = {}  # the release's files and their sizes
_DIRS: set[str] = set()  # the release's folders


def _release() -> dict[str, str]:
    if not _RELEASE:
        listing = _listing(RELEASE, dirs_seen=_DIRS) or frozenset()
        _SIZES.update({rel: size for rel, size, _ in listing})
        _RELEASE.update(_digests(RELEASE, listing))
    return _RELEASE


def _listing(root: Path, sizes: dict[str, int] | None = None, dirs: set[str] | None = None,
             dirs_seen: set[str] | None = None) -> frozenset[tuple[str, int, int]] | None:
    """The `.py` files under `root`'s packages: (path, size, time). Given the release's
    `sizes` and `dirs`, None at the first folder or file the release has not, or of another
    size: a citizen's planted tree of a million files or sparse file of 100 GB is neither
    walked to its end nor read (the scheduler's memory is every citizen's)."""
    found: set[tuple[str, int, int]] = set()
    for package in CODE:
        top = root / package
        if top.is_symlink() or not top.is_dir():
            return None
        for folder, subdirs, files in os.walk(top):  # never follows a link
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            here = [str(Path(folder, d).relative_to(root)) for d in subdirs]
            if dirs is not None and any(d not in dirs for d in here):
                return None
            if dirs_seen is not None:
                dirs_seen.update(here)
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = Path(folder, f)
                info = path.lstat()
                rel = str(path.relative_to(root))
                if sizes is not None and sizes.get(rel) != info.st_size:
                    return None
                found.add((rel, info.st_size, info.st_mtime_ns))
    return frozenset(found)


def _digests(root: Path, listing: frozenset[tuple[str, int, int]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel, size, _ in listing:
        try:
            # O_NOFOLLOW: a link is "not the release's", never read where it points.
            fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            out[rel] = "unreadable"
            continue
        with os.fdopen(fd, "rb") as f:
            # At most the size listed and a byte: a file grown since is not the release's.
            out[rel] = hashlib.sha256(f.read(size + 1)).hexdigest()
    return out
