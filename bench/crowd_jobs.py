"""Imported by `bench/daemons.py --floors`: one running BackgroundScheduler holding the
interval jobs of 1,000 citizens (wake, heartbeat, roll-up, retention, diversity - what
each daemon schedules today), to weigh one scheduler per server against a daemon each."""

from __future__ import annotations

from datetime import UTC

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

CITIZENS = 1000
JOBS = {"wake": 7200, "heartbeat": 30, "rollup": 3600, "retention": 86400, "diversity": 86400}


def due(name: str, job: str) -> None:
    """Never runs within the measurement (the shortest interval is longer)."""


scheduler = BackgroundScheduler(timezone=UTC)
for i in range(CITIZENS):
    for job, every in JOBS.items():
        scheduler.add_job(due, IntervalTrigger(seconds=every * 100), args=[f"c{i:04d}", job],
                          id=f"c{i:04d}-{job}", max_instances=1, coalesce=True,
                          misfire_grace_time=every // 2)
scheduler.start()
