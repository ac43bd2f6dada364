"""The resident daemon of one citizen: scheduler, doorbell, heartbeat - and nothing heavy.

It never imports a model SDK. Each wake runs in a child process through the same
entry point as `citizen wake`, so a crash, leak or hang in a wake cannot take the
daemon down: it reaps the child, records how it ended, and kills it past a
deadline. Manners (after rq's worker): the first SIGTERM lets the running wake
finish, the second stops at once; a second daemon for the same citizen refuses to
start; a heartbeat file and a process title say what it is doing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from citizen import civilization, config
from citizen.access.permit import HELD_ENV, Cancel
from citizen.config import paths
from citizen.daemon import ending, instance, status, timing, turn
from citizen.daemon.doorbell import Watch
from citizen.daemon.notify import DAEMON_PID_ENV, notify, watchdog_interval
from citizen.daemon.requests import WAKE_UP, Requests, WakeRequest
from citizen.daemon.status import State
from citizen.errors import CitizenError
from citizen.home import quiesce, retention, reviewing, rollback, state
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.mail.poller import MailPoller
from citizen.wake.flow import gate_here
from shared import clock, doorbell
from shared.atomic import sweep_temp

log = logging.getLogger(__name__)

DOORBELL_WINDOW_S = 3600.0  # the window budget.max_doorbell_wakes_per_hour counts in
RETENTION_S = 86400.0  # world seconds between wake-log retention sweeps (citizen.home.retention)


class Daemon:
    """Runs one citizen until stopped (or until `max_wakes` wakes, for demos and tests)."""

    def __init__(self, name: str, *, interval_s: float | None = None, max_wakes: int | None = None,
                 wake_timeout_s: float = 1200.0, first_wake_s: float | None = None,
                 heartbeat_s: float = 30.0, rollup_s: float = 3600.0,
                 scheduler: BackgroundScheduler | None = None) -> None:
        self.name = paths.check_name(name)
        self.home = paths.home(name)
        self.config = config.load_citizen(name)
        # The configured intervals are world time; the scheduler runs on the wall clock
        # (the same unless simulated: see shared.clock).
        self.interval_s = interval_s or clock.wall_seconds(self.config.wake_interval_minutes * 60)
        self.max_wakes = max_wakes
        self.wake_timeout_s = wake_timeout_s
        self.first_wake_s = (first_wake_s if first_wake_s is not None
                             else timing.first_wake_s(self.name, self.interval_s))
        self.heartbeat_s = heartbeat_s
        self.rollup_s = clock.wall_seconds(rollup_s)
        self.doorbell_window_s = clock.wall_seconds(DOORBELL_WINDOW_S)
        self.requests = Requests()  # rung wakes before a slot's (daemon/requests.py)
        self.pending: set[str | None] = set()
        self.pending_lock = threading.Lock()
        self.state, self.terms = State.STARTING, 0
        self.child: subprocess.Popen[bytes] | None = None
        self.current, self.waiting = "", ""  # waiting: in state WAITING, for what (turn.py)
        self.cancel = Cancel()  # a SIGTERM ends a wait for a wake permit; a crowd's is one
        self.wakes_run = 0
        # A crowd (`citizen run --all`, daemon/crowd.py) hosts many daemons in one process
        # and passes its one scheduler; the jobs are then named after the citizen.
        self.hosted = scheduler is not None
        self.scheduler = scheduler or BackgroundScheduler(timezone=UTC)
        self.job = (lambda job: f"{self.name}:{job}") if self.hosted else (lambda job: job)
        self.on_request: Callable[[Daemon], None] | None = None  # the crowd's dispatcher
        self.processes: threading.Semaphore | None = None  # the crowd's wake processes
        self._lock: contextlib.ExitStack | None = None  # held for the daemon's life
        self.mail = MailPoller(self.name, self.home, self.config)
        self.crashes, self.review_rung = 0, False  # wakes that crashed in a row; rung to test
        # Start times of doorbell wakes in the last hour (budget.max_doorbell_wakes_per_hour):
        # a peer's or a runaway model's endless rings wait for the window, one at a time.
        self.rung: deque[float] = deque()
        self.doorbell_mode = ""  # "inotify" or "polling (why)": in the heartbeat
        self.code_at = rollback.at(self.home)  # the wake runs this code: the daemon may gate here

    # ------------------------------------------------------------ lifecycle

    def run(self) -> int:
        """Run until stopped. Returns the process exit code."""
        if not self.home.dir.is_dir():
            raise CitizenError(f"citizen {self.name} has no home at {self.home.dir} - create "
                               "it with `citizen init` first")
        paths.require_owner(self.home)
        self.acquire_lock()
        try:
            self._start()
        except Exception as exc:
            # Where the operator looks: the journal (this line) and `citizen status` (the
            # heartbeat) - not only a traceback on a terminal nobody watches.
            log.error("citizen %s: the daemon cannot start: %s: %s", self.name,
                      type(exc).__name__, exc)
            self.state = State.FAILED
            status.beat(self.home, name=self.name, state=State.FAILED, current="",
                        next_at=None, wakes_run=0, error=f"{type(exc).__name__}: {exc}")
            raise
        log.info("citizen %s: daemon running (pid %d), a wake every %.0f s, first in %.0f s; "
                 "doorbell: %s", self.name, os.getpid(), self.interval_s, self.first_wake_s,
                 self.doorbell_mode)
        try:
            self._main_loop()
        finally:
            self._set_state(State.STOPPING)
            notify("STOPPING=1")
            self.mail.stop.set()
            self.scheduler.shutdown(wait=False)
            self._set_state(State.STOPPED)
            log.info("citizen %s: daemon stopped after %d wakes", self.name, self.wakes_run)
        return 0

    def _start(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        self.prepare()
        # Watch first, then drain: a ring landing in between is seen by one or the other
        # (watching from the thread itself raced the drain and lost rings).
        watch = Watch(self.home.doorbell)
        self.doorbell_mode = watch.mode
        self._schedule()
        watcher = threading.Thread(target=self._watch_doorbell, args=(watch,),
                                   name="doorbell", daemon=True)
        watcher.start()
        self.begin()
        notify("READY=1")

    def prepare(self) -> None:
        """Before the doorbell is watched: recover tasks, sweep temp files, make the bell."""
        for note in TaskQueue(self.home.tasks).recover():
            log.warning("recovered task %s", note)
        for stale in sweep_temp(self.home.dir):
            log.warning("removed %s, left by a writer that was killed", stale)
        self.home.doorbell.mkdir(parents=True, exist_ok=True)

    def begin(self) -> None:
        """Once watched and scheduled: the rings of while it was down, mail, asleep."""
        self._enqueue_rings()  # events rung while the daemon was down
        self.mail.start(self.scheduler)
        self._set_state(State.SLEEPING)
        rollback.ready(self.home)
        ending.report_rollbacks(self.home)

    def acquire_lock(self) -> None:
        self._lock = instance.take(self.home)

    def _schedule(self) -> None:
        """This citizen's jobs; on its own scheduler also the process's, and start it."""
        start = self._schedule_slots()
        self.scheduler.add_job(self._heartbeat, IntervalTrigger(seconds=self.heartbeat_s),
                               id=self.job("heartbeat"), max_instances=1, coalesce=True,
                               misfire_grace_time=int(self.heartbeat_s))
        self.scheduler.add_job(self._rollup_due, IntervalTrigger(seconds=self.rollup_s),
                               id=self.job("rollup"), max_instances=1, coalesce=True,
                               misfire_grace_time=max(1, int(self.rollup_s)))
        every = clock.wall_seconds(RETENTION_S)
        self.scheduler.add_job(retention.daily, IntervalTrigger(seconds=every),
                               id=self.job("retention"),
                               args=[self.name, self.home, self.config.logs],
                               next_run_time=start, max_instances=1, coalesce=True,
                               misfire_grace_time=max(1, int(every)))
        reviewing.schedule(self.scheduler, self.job("reviews"), self.home)
        if self.hosted:
            return  # the crowd schedules the process's own jobs once
        self.scheduler.add_job(civilization.keep_diverse, IntervalTrigger(seconds=every),
                               id="diversity", next_run_time=start, max_instances=1,
                               coalesce=True, misfire_grace_time=max(1, int(every)))
        if ping := watchdog_interval():
            # Fed from the scheduler's thread: a frozen process (SIGSTOP, a deadlocked
            # interpreter) stops feeding it, and systemd kills and restarts the daemon.
            self.scheduler.add_job(lambda: notify("WATCHDOG=1"), IntervalTrigger(seconds=ping),
                                   id="watchdog", max_instances=1, coalesce=True,
                                   misfire_grace_time=1)
        self.scheduler.start()

    def _schedule_slots(self) -> datetime:
        """The slot job: coalesced, one at a time, late by at most half an interval."""
        start = datetime.now(UTC) + timedelta(seconds=self.first_wake_s)
        self.scheduler.add_job(
            self.slot_due, IntervalTrigger(seconds=self.interval_s), id=self.job("wake"),
            next_run_time=start, max_instances=1, coalesce=True,
            misfire_grace_time=max(1, int(self.interval_s // 2)))
        return start

    def _on_term(self, signum: int, frame: FrameType | None) -> None:
        self.terms += 1
        # Unblock the main loop's wait - from another thread: this handler runs on the main
        # thread, which may be inside requests.get holding the queue's lock (a deadlock).
        threading.Thread(target=self.requests.put, args=(WAKE_UP,), daemon=True).start()
        if self.terms == 1:
            log.warning("citizen %s: stopping after the current wake (signal again to stop now)",
                        self.name)
            self.state = State.STOPPING
            self.cancel.set()  # a wake waiting for its permit has not started: it never will
            return
        log.warning("citizen %s: stopping now", self.name)
        self._stop_child()

    # ------------------------------------------------------------ work

    def _request(self, wake_type: str | None, reason: str) -> None:
        with self.pending_lock:
            again = wake_type in self.pending  # coalesced into the one already waiting
            self.pending.add(wake_type)
            self.review_rung = self.review_rung or bool(timing.REVIEW_RING.search(reason))
        if not again:
            self.requests.put(WakeRequest(wake_type, reason))
        if self.on_request is not None and (not again or self.review_rung):
            self.on_request(self)  # a crowd serves a citizen rung to review first

    def slot_due(self) -> None:
        """A slot's time came: queue its wake (and a STREAM wake while mail is held)."""
        if TaskQueue(self.home.tasks).ids("held"):  # a mail waits on a stream: never forget it
            self._request("STREAM", "mail held for a stream's decision")
        self._request(None, "slot")

    def _main_loop(self) -> None:
        while self.terms == 0:
            req = self.requests.get()  # blocks: a sleeping daemon uses no CPU
            if req is WAKE_UP:
                continue
            self.serve(req)
            if self.max_wakes is not None and self.wakes_run >= self.max_wakes:
                log.info("citizen %s: %d wakes done, as asked", self.name, self.wakes_run)
                return

    def serve(self, req: WakeRequest) -> None:
        """Run one request taken from the queue (unless the doorbell's hour is used up)."""
        with self.pending_lock:
            self.pending.discard(req.wake_type)
        if req.reason.startswith("doorbell") and self._over_doorbell_limit(req):
            return
        self._run_wake(req)

    def _over_doorbell_limit(self, req: WakeRequest) -> bool:
        """True if the hour's doorbell wakes are used up; the wake is then asked for again
        when the oldest leaves the window (rings meanwhile coalesce into it)."""
        cap = self.config.budget.max_doorbell_wakes_per_hour
        later = timing.doorbell_wait(self.rung, time.monotonic(), self.doorbell_window_s, cap)
        if later is None:
            return False
        log.warning("citizen %s: %d doorbell wakes this hour (budget.max_doorbell_wakes_per_"
                    "hour); %s waits %.0f s", self.name, cap, req.wake_type, later)
        when = datetime.now(UTC) + timedelta(seconds=later)
        # One deferred wake per type: more rings while over the limit coalesce into it.
        self.scheduler.add_job(self._request, "date", run_date=when,
                               args=[req.wake_type, req.reason],
                               id=self.job(f"doorbell-later-{req.wake_type}"),
                               replace_existing=True)
        return True

    def _run_wake(self, req: WakeRequest) -> None:
        with quiesce.working(self.name):  # a backup reads between wakes, never during one
            self._wake(req)

    def _wake(self, req: WakeRequest) -> None:
        number, slot = state.allocate(self.home, scheduled=req.wake_type is None)
        if self._idle_here(req, number, slot):
            return
        with self.processes or contextlib.nullcontext():  # a crowd bounds its wake processes
            self._wake_process(req, number, slot)

    def _wake_process(self, req: WakeRequest, number: int, slot: int | None) -> None:
        self.current = f"#{number} {req.wake_type or f'slot {slot}'}"
        with turn.taken(self.name, number, self.cancel,
                        lambda what: self._set_state(State.WAITING, what)) as permit:
            if permit is not None:
                self._run_child(req, number, slot, permit.watch)
            else:  # stopping while it waited: never started, its number goes back
                state.give_back(self.home, number, slot)
        self.current = ""

    def _run_child(self, req: WakeRequest, number: int, slot: int | None,
                   watch: Callable[[Callable[[str], None]], None]) -> None:
        args = [sys.executable, "-m", "citizen", "wake", self.name, "--number", str(number),
                "--reason", req.reason]
        args += ["--slot", str(slot)] if slot is not None else ["--type", str(req.wake_type)]
        self._set_state(State.WAKING)
        commit = rollback.head(self.home)  # the code this wake runs
        started = time.monotonic()
        # In our process group, not a session of its own: a SIGTERM to the group (a
        # harness's or a terminal's stop in dev mode; systemd's cgroup on a server) reaches
        # the wake too, which then stops at once with what it started (cli/wake.py). It
        # ignores SIGINT, so a terminal's Ctrl-C still reaches the daemon alone, which lets
        # the wake finish - and a SIGTERM to the daemon alone still does (its manners).
        env = {**os.environ, DAEMON_PID_ENV: str(os.getpid()), HELD_ENV: self.name}
        cwd = None
        if (self.home.code / "citizen" / "__init__.py").is_file():
            # The wake runs the citizen's own code (as the server's unit does), so what
            # it evolves is what it runs - and a change that breaks it is rolled back.
            env["PYTHONPATH"], cwd = str(self.home.code), self.home.code
        self.child = subprocess.Popen(args, env=env, cwd=cwd)
        watch(lambda why: turn.lost(number, why, self._stop_child))
        try:
            code = self.child.wait(timeout=self.wake_timeout_s)
        except subprocess.TimeoutExpired:
            log.error("wake %d ran past its %.0f s deadline; killing it", number,
                      self.wake_timeout_s)
            self._stop_child()
            code = self.child.wait()
        self.child = None
        self.wakes_run += 1
        crashed = ending.record(self.home, number, code, time.monotonic() - started)
        self.crashes = ending.after(self.home, crashed, commit, self.crashes)
        self.current = ""
        if self.state != State.STOPPING:
            self._set_state(State.SLEEPING)

    def _idle_here(self, req: WakeRequest, number: int, slot: int | None) -> bool:
        """Run the wake's gate here; True when it was idle (logged, no process started).
        Only while ~/code is at the commit the daemon started on (after an adoption or a
        rollback the wake process decides) and that commit is last-known-good (a wake
        process completed on it: what a rollback goes back to)."""
        now = rollback.at(self.home)
        if now != self.code_at or now == rollback.UNREADABLE or (
                now and state.load(self.home)["marks"].get(rollback.LKG) != now):
            return False
        try:
            idle = gate_here(self.name, number=number, slot=slot, wake_type=req.wake_type,
                             reason=req.reason)
        except Exception as exc:  # noqa: BLE001 - the wake process runs the gate again and logs it
            log.warning("wake %d: the gate failed here (%s); the wake process decides", number,
                        exc)
            return False
        if idle is None:
            return False
        self.wakes_run += 1
        self.crashes = 0  # as an idle wake process would: it did not crash
        log.info("wake %d %s: %s in the daemon - %s", number, idle.wake_type, idle.status,
                 idle.reason)
        return True

    def _stop_child(self) -> None:
        ending.stop(self.child)

    def _rollup_due(self) -> None:
        """The deterministic gate for memory roll-ups; the model runs in a child."""
        if self.state == State.STOPPING or not Memory(self.home.memory).pending():
            return
        with quiesce.working(self.name):
            subprocess.run([sys.executable, "-m", "citizen", "memory", "rollup", self.name],
                           check=False, timeout=self.wake_timeout_s)

    # ------------------------------------------------------------ doorbell

    def _enqueue_rings(self) -> None:
        for r in doorbell.drain(self.home.doorbell):
            log.info("doorbell: %s wake for %s (from %s)", r.wake_type, r.reason, r.sender)
            self._request(r.wake_type, f"doorbell: {r.reason}")

    def _watch_doorbell(self, watch: Watch) -> None:
        while self.state != State.STOPPED:
            if watch.wait():  # blocks (this thread dies with us)
                self._enqueue_rings()

    # ------------------------------------------------------------ status

    def _next_wake(self) -> datetime | None:
        job = self.scheduler.get_job(self.job("wake")) if self.scheduler.running else None
        return job.next_run_time if job else None

    def _set_state(self, new: State, waiting: str = "") -> None:
        self.state, self.waiting = new, waiting  # waiting: for what, in state WAITING
        if not self.hosted:  # a crowd's process speaks for all its citizens
            text = status.title(self.name, new, self.current, self._next_wake(), self.waiting)
            status.set_title(text)
            notify(f"STATUS={text}")
        self._heartbeat()

    def _heartbeat(self) -> None:
        status.beat(self.home, name=self.name, state=self.state, current=self.current,
                    next_at=self._next_wake(), wakes_run=self.wakes_run,
                    doorbell=self.doorbell_mode, waiting=self.waiting)
