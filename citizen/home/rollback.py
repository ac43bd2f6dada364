"""The safety net under self-evolution: back to the last known good code.

A citizen's wakes run its newest `~/code`. The commit of a wake that completed is
recorded as last-known-good; when three wakes in a row crash, the daemon resets
`~/code` to it (keeping the broken commit on a `broken/<sha>` branch for inspection)
and files a `failed` outcome for the change. A daemon that cannot even start is
caught before Python imports the broken code: `scripts/start_guard.py` (stdlib only,
run by systemd's ExecStartPre) rolls back after three starts that never reached READY.

Every rollback is a line of `logs/rollbacks.jsonl`; the changes it reverted get their
`failed` reports from `report_rollbacks`, which the daemon runs after its own rollback
and at each start that reaches READY - so a start guard's rollback, which cannot file
reports itself (it may not import our code), is reported by the first good start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from citizen.config.paths import Home
from citizen.home import state
from shared import gitsafe
from shared.atomic import append_line, read_jsonl
from shared.errors import SharedError

if TYPE_CHECKING:
    from shared.evolution import Evolution

log = logging.getLogger(__name__)

CRASHES_BEFORE_ROLLBACK = 3
LKG = "last_known_good"
START_ATTEMPTS = ".start_attempts"  # written by scripts/start_guard.py, cleared at READY
ROLLBACKS = "logs/rollbacks.jsonl"
REPORTED = "rollbacks_reported"  # how many lines of ROLLBACKS have had their reports filed
UNREADABLE = "unreadable"  # at(): a HEAD its files do not name; the code it runs is unknown


def head(home: Home) -> str | None:
    """The commit `~/code` is at (None when it is not a git repository)."""
    # Through gitsafe: the sandbox may have written ~/code/.git/config and ~/.gitconfig.
    if not (home.code / ".git").is_dir():
        return None
    try:
        return gitsafe.out(home.code, "rev-parse", "--verify", "HEAD^{commit}")
    except gitsafe.GitFailed:
        return None


def at(home: Home) -> str | None:
    """The commit `~/code` is at, read from its files (no git process, so a daemon can ask
    at every wake): None when no code of its own runs there, the daemon's then."""
    if not (home.code / "citizen" / "__init__.py").is_file():
        return None
    try:
        return gitsafe.read_head(home.code)
    except SharedError:
        return UNREADABLE


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
    gitsafe.run(home.code, "branch", "-f", f"broken/{broken[:12]}", broken)
    gitsafe.run(home.code, "reset", "--hard", good)
    append_line(home.dir / ROLLBACKS, {"from": broken, "to": good, "reason": reason})
    log.error("rolled ~/code back from %s to last-known-good %s: %s", broken[:12], good[:12],
              reason)
    return broken


def unreported(home: Home) -> bool:
    """Whether a rollback's changes still wait for their `failed` reports."""
    path = home.dir / ROLLBACKS
    return path.exists() and len(read_jsonl(path)) > int(
        state.load(home)["marks"].get(REPORTED, 0))


def report_rollbacks(home: Home, evolution: Evolution) -> list[str]:
    """File `failed` for the changes of every rollback not yet reported; the change ids."""
    entries = read_jsonl(home.dir / ROLLBACKS) if (home.dir / ROLLBACKS).exists() else []
    done = int(state.load(home)["marks"].get(REPORTED, 0))
    filed: list[str] = []
    for entry in entries[done:]:
        filed += report_failed(home, str(entry["from"]), str(entry.get("reason", "")),
                               evolution, good=entry.get("to"))
    state.mark(home, REPORTED, len(entries))
    return filed


def report_failed(home: Home, broken: str, reason: str, evolution: Evolution,
                  good: str | None = None) -> list[str]:
    """File `failed` for every change this citizen made or adopted between `good`
    (default: last-known-good) and `broken`: its own as the author's report, an adopted
    one as an adopter's, which counts towards `verified_failed`."""
    good = good or state.load(home)["marks"].get(LKG)
    try:
        reverted = (set(gitsafe.out(home.code, "rev-list", f"{good}..{broken}", "--")
                        .split()) if good else {broken})
    except gitsafe.GitFailed:
        log.warning("rollback %s..%s: a commit is gone (broken/ branch deleted?); reporting "
                    "only the broken commit", str(good)[:12], broken[:12])
        reverted = {broken}
    filed = []
    for change in evolution.changes():
        mine = change.citizen == home.name and change.commit in reverted
        adopted = change.adoptions.get(home.name, {}).get("commit") in reverted
        if mine or adopted:
            evolution.report(change.id, home.name, "failed", f"rolled back: {reason}")
            filed.append(change.id)
    return filed
