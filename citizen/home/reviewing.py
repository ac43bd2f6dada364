"""An author's follow-up of its own pending changes: ring a reviewer drawn in for a silent one.

`code_announce` rings the first k reviewers of the broker's draw and remembers the change
here (a mark in the citizen's state). A reviewer that stays silent past the deadline
hands its slot to the next in the draw (`shared.change_rules.assigned`); nobody is told
so by the records alone, so the author's daemon looks every FOLLOW_UP_S (world time) at
the changes it remembers and rings whoever was drawn in since - its own interest, and its
doorbell budget. A change that is no longer pending is forgotten, so the mark stays as
small as the author's open changes. A change without a draw yet (the broker was down at
the announcement) is asked for one again.
"""

from __future__ import annotations

import logging
from typing import Any

from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from citizen import civilization
from citizen.config.paths import Home
from citizen.home import state
from shared import clock
from shared.errors import NotAllowed, NotFound, SharedError

log = logging.getLogger(__name__)

MARK = "reviews_asked"  # {change id: [the reviewers rung so far]}
FOLLOW_UP_S = 300.0  # world seconds between looks: a deadline is an hour (change_rules)
MAX_OPEN = 50  # changes remembered; an author announcing more forgets the oldest
REVIEW_WAKE = "REVIEW"


def remember(home: Home, change_id: str, rung: list[str]) -> None:
    """Note that `change_id` was announced and `rung` were asked to review it."""
    asked: dict[str, Any] = dict(state.load(home)["marks"].get(MARK) or {})
    asked[change_id] = sorted(rung)
    state.mark(home, MARK, dict(list(asked.items())[-MAX_OPEN:]))


def follow_up(home: Home) -> list[str]:
    """Ring the reviewers drawn in since the last look; returns "change: name" per ring.
    Never raises for one change (logged): the next look tries again."""
    asked: dict[str, Any] = dict(state.load(home)["marks"].get(MARK) or {})
    if not asked:
        return []  # the common case: no record read, no commons opened
    commons = civilization.commons()
    evolution, me, rang, keep = commons.evolution, home.name, [], {}
    for change_id, rung in asked.items():
        try:
            change = evolution.get(change_id)
            if change.status != "pending" or change.citizen != me:
                continue  # settled (or not ours): forgotten
            if not change.reviewers and evolution.draw_request is not None:
                evolution.draw_request(me, change_id)  # the broker was down at the announcement
                change = evolution.get(change_id)
            new = [r for r in change.reviewers if r not in rung]
            for reviewer in new:
                commons.ring(reviewer, REVIEW_WAKE, f"you were drawn to review {change_id} "
                             "(a reviewer before you did not answer)", sender=me)
                rang.append(f"{change_id}: {reviewer}")
            keep[change_id] = sorted({*rung, *new})
        except NotFound:
            continue  # the change is gone: nothing to follow
        except NotAllowed as exc:
            log.info("follow-up of %s: %s", change_id, exc)
            keep[change_id] = rung  # the broker or the records may answer next time
        except (SharedError, OSError) as exc:
            log.warning("follow-up of %s failed: %s", change_id, exc)
            keep[change_id] = rung
    if keep != asked:
        state.mark(home, MARK, keep)
    return rang


def schedule(scheduler: BaseScheduler, job_id: str, home: Home) -> None:
    """The daemon's job: `follow_up` every FOLLOW_UP_S of world time. Not the server's
    scheduler's (it writes nothing in a home): there a replacement reviewer finds the
    change at its own REVIEW slot."""
    every = clock.wall_seconds(FOLLOW_UP_S)
    scheduler.add_job(_follow_up_logged, IntervalTrigger(seconds=every), id=job_id,
                      args=[home], max_instances=1, coalesce=True,
                      misfire_grace_time=max(1, int(every)))


def _follow_up_logged(home: Home) -> None:
    try:
        for rung in follow_up(home):
            log.info("%s: rang %s (drawn in for a silent reviewer)", home.name, rung)
    except Exception as exc:  # noqa: BLE001 - a job that raises is logged by nobody; the next try
        log.warning("%s: the reviewers' follow-up failed: %s", home.name, exc)
