"""The safety net under self-evolution: back to the last known good code.

A citizen's wakes run its newest `~/code`. The commit of a wake that completed is
recorded as last-known-good; when three wakes in a row crash, the daemon resets
`~/code` to it (keeping the broken commit on a `broken/<sha>` branch for inspection)
and files a `failed` outcome for the change. A daemon that cannot even start is
caught before Python imports the broken code: `scripts/start_guard.py` (stdlib only,
run by systemd's ExecStartPre) rolls back after three starts that never reached READY.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import git

from citizen import state
from citizen.paths import Home
from shared.atomic import append_line

if TYPE_CHECKING:
    from shared.evolution import Evolution

log = logging.getLogger(__name__)

CRASHES_BEFORE_ROLLBACK = 3
LKG = "last_known_good"
START_ATTEMPTS = ".start_attempts"  # written by scripts/start_guard.py, cleared at READY


def head(home: Home) -> str | None:
    """The commit `~/code` is at (None when it is not a git repository)."""
    try:
        return str(git.Repo(home.code).head.commit.hexsha)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        return None


def record_good(home: Home, commit: str) -> None:
    """A wake completed on `commit`: it is the new last-known-good."""
    if state.load(home)["marks"].get(LKG) != commit:
        state.mark(home, LKG, commit)


def ready(home: Home) -> None:
    """The daemon reached READY: the start guard's count starts again."""
    (home.dir / START_ATTEMPTS).unlink(missing_ok=True)


def roll_back(home: Home, reason: str) -> str | None:
    """Reset `~/code` to last-known-good; returns the broken commit (None: nothing to do)."""
    good = state.load(home)["marks"].get(LKG)
    broken = head(home)
    if not good or not broken or broken == good:
        log.error("wakes keep crashing, but there is no other known-good commit to go back to")
        return None
    repo = git.Repo(home.code)
    repo.git.branch("-f", f"broken/{broken[:12]}", broken)
    repo.git.reset("--hard", good)
    append_line(home.dir / "logs" / "rollbacks.jsonl",
                {"from": broken, "to": good, "reason": reason})
    log.error("rolled ~/code back from %s to last-known-good %s: %s", broken[:12], good[:12],
              reason)
    return broken


def report_failed(home: Home, broken: str, reason: str, evolution: Evolution) -> list[str]:
    """File `failed` for every change of this citizen between last-known-good and `broken`."""
    repo = git.Repo(home.code)
    good = state.load(home)["marks"].get(LKG)
    reverted = {c.hexsha for c in repo.iter_commits(f"{good}..{broken}")} if good else {broken}
    filed = []
    for change in evolution.changes():
        if change.citizen == home.name and change.commit in reverted:
            evolution.report(change.id, home.name, "failed", f"rolled back: {reason}")
            filed.append(change.id)
    return filed
