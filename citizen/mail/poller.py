"""The daemon's mail job: poll the INBOX through the broker every `mail.poll_seconds`
(and, with `mail.idle`, wait on the broker's IMAP IDLE between polls), send the outbox,
and back off while the server fails - without ever taking the daemon down."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from citizen import config, mail
from citizen.config.paths import Home
from citizen.home import quiesce
from citizen.mail.intake import Intake
from citizen.mail.outbox import flush

log = logging.getLogger(__name__)
MAX_BACKOFF_S = 3600.0


class MailPoller:
    """One citizen's mailbox as the daemon sees it."""

    def __init__(self, name: str, home: Home, cfg: config.CitizenConfig) -> None:
        self.name, self.home, self.config = name, home, cfg
        self.intake: Intake | None = None
        self.stop = threading.Event()
        self.failures = 0
        self.retry_at = 0.0

    def start(self, scheduler: BaseScheduler) -> None:
        """Add the mail job (and the IMAP IDLE watcher) when the citizen has mail."""
        secrets = config.load_secrets(self.name)
        if not mail.configured(secrets):
            log.info("citizen %s: no mailbox configured (%s and EMAIL_PASS in its .env)",
                     self.name, ", ".join(mail.SETTINGS))
            return
        self.intake = Intake(self.home, self.config, mail.citizen_directory())
        every = self.config.mail.poll_seconds
        scheduler.add_job(self._due, IntervalTrigger(seconds=every), id="mail",
                          next_run_time=datetime.now(UTC), max_instances=1, coalesce=True,
                          misfire_grace_time=max(1, int(every)))
        if self.config.mail.idle:
            threading.Thread(target=self.intake.watch, args=(self.poll, self.stop),
                             name="mail-idle", daemon=True).start()

    def _due(self) -> None:
        if time.monotonic() >= self.retry_at:
            self.poll()

    def poll(self) -> None:
        """Poll the INBOX and send the outbox; back off while the server fails."""
        if self.intake is None:
            return
        try:
            with quiesce.working(self.name):  # mail becomes tasks: not while a backup reads
                for o in self.intake.poll():
                    log.info("mail %s: %s %s", o.message_id, o.action, o.detail)
                flush(self.home)
            self.failures = 0
        except mail.MailNotConfigured as exc:  # the broker's answer: nothing to poll
            log.info("mail: %s; not polling", exc)
            self.intake = None
        except mail.MailError as exc:
            self.failures += 1
            delay = min(self.config.mail.poll_seconds * 2 ** self.failures, MAX_BACKOFF_S)
            self.retry_at = time.monotonic() + delay
            log.error("mail: %s (failure %d; next try in %.0f s)", exc, self.failures, delay)
