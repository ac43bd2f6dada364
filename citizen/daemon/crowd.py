"""Many citizens' daemons in one process: `citizen run --all` (issue 33).

A daemon each holds 28 MB asleep, most of it the interpreter and APScheduler
(`bench/daemons.py --floors`); one process holding every citizen's jobs costs a few KB a
citizen more. The crowd keeps each citizen a `Daemon` of its own - its lock, its
counters, its gate, its doorbell's hourly window, its rollback - and shares what a
process has once: one scheduler, one doorbell watch (one inotify instance for every
citizen's folder), the signals, the process title and the watchdog.

Each citizen still has at most one wake at a time, its requests ordered (rung before a
slot's, daemon/requests.py) and coalesced as in its own daemon; different citizens'
wakes run side by side. A wake with work is its own process, as always, at most
`parallel` at once, and each holds its wake permit from the broker (the civilization's
bound, daemon/turn.py); the gate that finds a wake idle (~2 ms, here) has workers of its
own beyond those, so idle wakes keep to their schedule while long wakes run.

It is the dev-mode shape, where every home belongs to one user; on a server each citizen
is its own user and `citizen@NAME` runs its own daemon (docs/architecture.md §7 says
what one scheduler per server would take).
"""

from __future__ import annotations

import logging
import queue
import resource
import signal
import threading
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from citizen import civilization
from citizen.access.permit import Cancel
from citizen.config import paths
from citizen.daemon import status
from citizen.daemon.doorbell import Watch
from citizen.daemon.instance import AlreadyRunning
from citizen.daemon.notify import notify, watchdog_interval
from citizen.daemon.process import RETENTION_S, Daemon
from citizen.daemon.requests import WakeRequest
from citizen.daemon.status import State
from citizen.errors import WrongUser
from shared import clock

log = logging.getLogger(__name__)

GATE_WORKERS = 4  # workers beyond `parallel`: gates are not held up by running wakes
_LOOK = object()  # "look again": a signal came or a worker is free


class Crowd:
    """Runs the daemons of `names` in this process until stopped (or `max_wakes` wakes)."""

    def __init__(self, names: list[str], *, interval_s: float | None = None,
                 max_wakes: int | None = None, wake_timeout_s: float = 1200.0,
                 first_wake_s: float | None = None, parallel: int = 2) -> None:
        self.names = names
        self.interval_s, self.wake_timeout_s = interval_s, wake_timeout_s
        self.first_wake_s = first_wake_s
        self.max_wakes = max_wakes
        self.parallel = max(1, parallel)
        self.workers = self.parallel + GATE_WORKERS
        self.processes = threading.BoundedSemaphore(self.parallel)
        self.cancel = Cancel()
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.daemons: dict[str, Daemon] = {}
        # A Daemon that wants a wake, or _LOOK. SimpleQueue: its put is reentrant, so the
        # signal handler may put while this thread is inside get (a Queue could deadlock).
        self.events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.work: queue.Queue[tuple[Daemon, WakeRequest] | None] = queue.Queue()
        self.finished: queue.Queue[Daemon] = queue.Queue()
        self.busy: set[str] = set()  # citizens with a wake running
        self.ready: deque[Daemon] = deque()  # citizens with requests, waiting for a worker
        # Rung to review a change (its announcement, a reviewer drawn in): ahead of the rest,
        # first come first served among themselves - a verification rings every peer to
        # adopt, and later changes' reviews must not wait behind a thousand such wakes
        # (issue 43). A ring's reason is a peer's text: a forged one moves only the order
        # of gates, which still open on the records alone, and the doorbell's hourly cap
        # bounds how often.
        self.ready_first: deque[Daemon] = deque()
        self.terms = 0

    def run(self) -> int:
        """Start every citizen that can be started; run until stopped. The exit code."""
        threading.current_thread().name = "citizen:all"
        _raise_file_limit(len(self.names))
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        for name in self.names:
            self._admit(name)
        if not self.daemons:
            log.error("no citizen could be started (see above)")
            return 1
        for d in list(self.daemons.values()):
            self._step(d, d.prepare)
        # One watch for every doorbell, made before the rings of while we were down are
        # drained (as a daemon does): a ring landing in between is seen by one or the other.
        watch = Watch(*(d.home.doorbell for d in self.daemons.values()))
        by_bell = {d.home.doorbell: d for d in self.daemons.values()}
        for d in self.daemons.values():
            d.doorbell_mode = watch.mode
            d.on_request = self.events.put
            # A process slot is taken before the wake permit (the crowd holds no permit it
            # has no process for); one stop ends every wait for a permit.
            d.processes, d.cancel = self.processes, self.cancel
            d._schedule()
        self._schedule()
        threading.Thread(target=self._watch, args=(watch, by_bell), name="doorbell",
                         daemon=True).start()
        for i in range(self.workers):
            threading.Thread(target=self._worker, name=f"wakes-{i}", daemon=True).start()
        for d in list(self.daemons.values()):
            self._step(d, d.begin)
        if not self.daemons:
            log.error("no citizen could be started (see above)")
            return 1
        notify("READY=1")
        log.info("%d citizens in one process, at most %d wake processes at once; doorbells: %s",
                 len(self.daemons), self.parallel, watch.mode)
        try:
            self._loop()
        finally:
            notify("STOPPING=1")
            self.scheduler.shutdown(wait=False)
            for d in self.daemons.values():
                d.mail.stop.set()
                d._set_state(State.STOPPED)
            self.stopped()
            log.info("stopped after %d wakes", self.wakes_run())
        return 0

    def _admit(self, name: str) -> None:
        """Make citizen `name`'s daemon and take its lock; a citizen that cannot be
        hosted is said (journal and heartbeat) and left out, the others go on."""
        try:
            d = self.make(name)
            d.acquire_lock()
        except (AlreadyRunning, WrongUser) as exc:
            log.warning("%s: left out - %s", name, exc)
            return
        except Exception as exc:  # noqa: BLE001 - one citizen's bad config stops only it
            self.failed(name, exc)
            return
        self.daemons[name] = d

    def make(self, name: str) -> Daemon:
        """Citizen `name`'s daemon, hosted here."""
        paths.require_owner(paths.home(name))  # before anything is written there
        return Daemon(name, interval_s=self.interval_s, wake_timeout_s=self.wake_timeout_s,
                      first_wake_s=self.first_wake_s, scheduler=self.scheduler)

    def failed(self, name: str, exc: Exception) -> None:
        """Say that citizen `name` cannot be started: the journal and its heartbeat."""
        log.error("citizen %s: cannot be started: %s: %s", name, type(exc).__name__, exc)
        status.beat(paths.home(name), name=name, state=State.FAILED, current="",
                    next_at=None, wakes_run=0, error=f"{type(exc).__name__}: {exc}")

    def _step(self, d: Daemon, step: Callable[[], None]) -> None:
        """One step of a citizen's start; if it fails (a home the citizen broke), that
        citizen is said and left out - its jobs and lock let go - and the others go on."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - one citizen's broken home stops only it
            self.failed(d.name, exc)
            for job in self.scheduler.get_jobs():
                if job.id.startswith(f"{d.name}:"):
                    job.remove()
            d.mail.stop.set()
            if d._lock is not None:
                d._lock.close()
            del self.daemons[d.name]

    def _schedule(self) -> None:
        """The process's own jobs (a daemon alone schedules them itself), then start."""
        self._own_jobs()
        ping = watchdog_interval()
        if ping:
            self.scheduler.add_job(lambda: notify("WATCHDOG=1"), IntervalTrigger(seconds=ping),
                                   id="watchdog", max_instances=1, coalesce=True,
                                   misfire_grace_time=1)
        self.scheduler.start()

    def _own_jobs(self) -> None:
        """Beyond the citizens' jobs and the watchdog: the daily weight diversity."""
        every = clock.wall_seconds(RETENTION_S)  # daily, in world time
        first = min(d.first_wake_s for d in self.daemons.values())
        self.scheduler.add_job(civilization.keep_diverse, IntervalTrigger(seconds=every),
                               id="diversity", max_instances=1, coalesce=True,
                               next_run_time=datetime.now(UTC) + timedelta(seconds=first),
                               misfire_grace_time=max(1, int(every)))

    def stopped(self) -> None:
        """Once every citizen is stopped (a scheduler writes its status)."""

    def wakes_run(self) -> int:
        return sum(d.wakes_run for d in self.daemons.values())

    def _done(self) -> bool:
        stopping = self.terms > 0 or (self.max_wakes is not None
                                      and self.wakes_run() >= self.max_wakes)
        return stopping and not self.busy

    def _loop(self) -> None:
        """The one thread that decides what runs: who is busy, who waits, in what order."""
        while not self._done():
            try:
                event = self.events.get(timeout=1.0)  # the timeout only re-checks _done
            except queue.Empty:
                event = None
            while True:  # wakes that ended free their citizen (and maybe a worker)
                try:
                    ended = self.finished.get_nowait()
                except queue.Empty:
                    break
                self.busy.discard(ended.name)
                if not ended.requests.empty():
                    self._queue(ended)
            if isinstance(event, Daemon) and event.name in self.daemons \
                    and event.name not in self.busy:
                self._queue(event)
            self._dispatch()

    def _queue(self, d: Daemon) -> None:
        # Rung to test a change, even into a wake already waiting (coalesced): first.
        (self.ready_first if d.review_rung else self.ready).append(d)

    def _dispatch(self) -> None:
        """Hand requests to the workers: one wake a citizen, as many as workers."""
        if self.terms or (self.max_wakes is not None and self.wakes_run() >= self.max_wakes):
            return
        while (self.ready_first or self.ready) and len(self.busy) < self.workers:
            d = (self.ready_first or self.ready).popleft()
            if d.name in self.busy:
                continue  # queued twice; its wake's end brings it back
            try:
                req = d.requests.get_nowait()
            except queue.Empty:
                continue
            self.busy.add(d.name)
            d.review_rung = False  # this wake's gate finds the test, if it still waits
            self.work.put((d, req))
        status.set_title(f"citizen: {len(self.daemons)} citizens, {len(self.busy)} waking")

    def _worker(self) -> None:
        me = threading.current_thread()
        idle_name = me.name
        while (item := self.work.get()) is not None:
            d, req = item
            me.name = f"citizen:{d.name}"  # the journal's lines say whose wake they are
            try:
                d.serve(req)
            except Exception:
                log.exception("the wake could not be run")
            finally:
                me.name = idle_name
                self.finished.put(d)
                self.events.put(_LOOK)  # a worker is free

    def _watch(self, watch: Watch, by_bell: dict[Path, Daemon]) -> None:
        while True:
            for bell in watch.wait_any():  # blocks (this thread dies with the process)
                d = by_bell.get(bell)
                if d is None:
                    continue
                try:
                    d._enqueue_rings()
                except Exception:  # one thread hears every bell: one bad ring deafens none
                    log.exception("citizen %s: doorbell not read", d.name)

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.terms += 1
        self.events.put(_LOOK)
        if self.terms == 1:
            log.warning("stopping after the wakes running now (signal again to stop now)")
            for d in self.daemons.values():
                d.state = State.STOPPING
            self.cancel.set()  # the wakes waiting for their permits never start
            return
        log.warning("stopping now")
        for d in self.daemons.values():
            d._stop_child()


def _raise_file_limit(citizens: int) -> None:
    """Each hosted citizen holds its lock file open: lift the soft limit on open files
    to the hard one (never past it; no privilege needed) so a thousand fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < citizens * 2 + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
