"""The server's one scheduler: every citizen's schedule in one process, as its own user
(`experience-scheduler.service`; docs/architecture.md §7).

A crowd (daemon/crowd.py) whose citizens are `Scheduled` (daemon/scheduled.py): the
same one APScheduler, one doorbell watch, workers and bounds - but it writes no home.
A wake with work is the citizen's unit, `citizen-wake@NAME`, started through systemd
and run as the citizen; an idle wake is a line in the scheduler's own store. A sleeping
citizen has no process: its part of this one is a few KB (`bench/daemons.py --floors`).
"""

from __future__ import annotations

import logging
import pwd
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.triggers.interval import IntervalTrigger

from citizen.access import client
from citizen.access.commons import RINGS_VIEW
from citizen.admin.schedstore import Store
from citizen.config import paths, server_mode
from citizen.daemon.crowd import Crowd
from citizen.daemon.process import Daemon
from citizen.daemon.scheduled import MAIL, Scheduled, Starter
from citizen.errors import CitizenError, ProviderUnavailable

log = logging.getLogger(__name__)

STATUS_S = 30.0  # the status file is written this often (a heartbeat for all)
MAIL_S = 60.0  # the broker is asked this often whose INBOX grew (a daemon polls as often)
FAR_WAIT_S = 25.0  # one long poll for rings from other servers (the broker's at most 30)
FAR_RETRY_S = 5.0  # the broker did not answer it: asked again after this


class Scheduler(Crowd):
    """Every citizen of `names` scheduled here; wakes with work started by `starter`."""

    def __init__(self, names: list[str], *, store: Store, starter: Starter,
                 news: Callable[[], dict[str, Any]] | None = None, **kw: object) -> None:
        super().__init__(names, **kw)  # type: ignore[arg-type]
        self.store, self.starter, self.news = store, starter, news
        self.left_out: dict[str, str] = {}  # citizens not scheduled, and why (in the status)

    def run(self) -> int:
        self.store.make()
        if paths.civilization_file().is_file():  # one of several servers: far rings too
            threading.Thread(target=self._far_rings, name="far-rings", daemon=True).start()
        return super().run()

    def _far_rings(self) -> None:
        """Ask the broker, again and again, for the rings its LISTEN heard for this
        server's citizens (citizen.broker.rings); each is a wake requested as for a
        doorbell file. The broker down or refusing: asked again in FAR_RETRY_S."""
        while not self.cancel.is_set:
            try:
                status, answer = client.view(RINGS_VIEW, {"wait": int(FAR_WAIT_S)},
                                             timeout_s=FAR_WAIT_S + 15)
            except ProviderUnavailable as exc:
                status, answer = 503, str(exc)
            if status != 200 or not isinstance(answer, dict):
                log.warning("rings from other servers not heard (%s): %.200s", status, answer)
                self.cancel.wait(FAR_RETRY_S)
                continue
            for ring in answer.get("rings") or []:
                d = self.daemons.get(str(ring.get("citizen")))
                if isinstance(d, Scheduled):
                    d.far_ring(str(ring.get("wake_type")), str(ring.get("reason", "")),
                               str(ring.get("sender", "?")))

    def make(self, name: str) -> Daemon:
        home = paths.home(name)
        owner = pwd.getpwuid(home.dir.stat().st_uid).pw_name if home.dir.is_dir() else ""
        if server_mode() and owner != name:
            # The kernel's word: a home whose owner is not the user of that name is no
            # citizen's (a citizen cannot make one for another: /home is root's).
            raise CitizenError(f"{home.dir} belongs to {owner or '?'}, not to a user {name}")
        return Scheduled(name, store=self.store, starter=self.starter,
                         interval_s=self.interval_s, wake_timeout_s=self.wake_timeout_s,
                         first_wake_s=self.first_wake_s, scheduler=self.scheduler)

    def failed(self, name: str, exc: Exception) -> None:
        log.error("citizen %s: not scheduled: %s: %s", name, type(exc).__name__, exc)
        self.left_out[name] = f"{type(exc).__name__}: {exc}"

    def _own_jobs(self) -> None:
        """The status (a heartbeat for all) and the question of new mail; the daily
        diversity is the wake units' (daemon/unit.py)."""
        self.scheduler.add_job(self._beat, IntervalTrigger(seconds=STATUS_S), id="status",
                               next_run_time=datetime.now(UTC) + timedelta(seconds=1),
                               max_instances=1, coalesce=True, misfire_grace_time=int(STATUS_S))
        if self.news is not None:
            self.scheduler.add_job(self._mail, IntervalTrigger(seconds=MAIL_S), id="mail",
                                   next_run_time=datetime.now(UTC), max_instances=1,
                                   coalesce=True, misfire_grace_time=int(MAIL_S))

    def _mail(self) -> None:
        """Ask the broker whose INBOX grew; wake each such citizen (its wake takes the
        mail in, as the citizen). A citizen met for the first time is only noted: its
        next wake takes in whatever waits."""
        if self.news is None:
            return
        try:
            answer = self.news()
        except Exception as exc:  # noqa: BLE001 - the broker down: ask again next time
            log.warning("new mail not known: %s", exc)
            return
        seen = self.store.mail_seen()
        grew = False
        for name, uidnext in (answer.get("uidnext") or {}).items():
            d = self.daemons.get(name)
            if not isinstance(d, Scheduled) or not isinstance(uidnext, int):
                continue
            if name in seen and uidnext > seen[name]:
                d._request("TASK", f"{MAIL}new in the INBOX")
            grew = grew or seen.get(name) != uidnext
            seen[name] = uidnext
        for name, why in (answer.get("errors") or {}).items():
            log.warning("citizen %s: its INBOX not asked: %s", name, why)
        if grew:
            self.store.write_mail_seen(seen)

    def _beat(self) -> None:
        lines = {d.name: d.line() for d in self.daemons.values() if isinstance(d, Scheduled)}
        for name, why in self.left_out.items():
            lines.setdefault(name, {"state": "failed", "error": why})
        try:
            self.store.write_status(lines)
        except OSError as exc:
            log.warning("status not written: %s", exc)

    def stopped(self) -> None:
        self._beat()
