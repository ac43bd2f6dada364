"""Each citizen's disk budget, enforced from outside its Unix user.

A citizen's whole user is untrusted (docs/architecture.md §4), so nothing it runs can be the
check: root's `experience-disk.timer` runs the root-owned release's `citizen disk
check --enforce` every few minutes. It measures each home with `du` (links not
followed, one file system, each inode once, blocks really used - a sparse file counts
what it holds) within a time bound, judges it against `budget.max_home_mb` from the
operator's rules (on a server never the home's config.json), and past the budget stops
the citizen's unit, says so in the journal and records the verdict where `citizen
status` shows it (root's state directory, outside every home).

A home too big to measure in time counts as over: making `du` slow must not be a way
around the budget. The unit is stopped, not killed: the running wake ends as on any
stop (KillMode=mixed), and the next check stops it again if the operator starts it
before space is freed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from citizen import civilization, config
from citizen.civilization import citizen_users
from citizen.config import Budget, paths
from citizen.errors import CitizenError, ConfigError
from shared import clock
from shared.atomic import CorruptFile, read_json, write_json

log = logging.getLogger(__name__)
STATE_ENV = "EXPERIENCE_DISK_STATE"
SERVER_STATE = Path("/var/lib/experience-disk")  # the timer's StateDirectory (root's)
MEASURE_TIMEOUT_S = 300.0  # one home; longer counts as over
NEAR = 0.9  # past this share of the budget the verdict warns
MIB = 1 << 20
ENFORCED = ("over", "unmeasured")


class DiskError(CitizenError, RuntimeError):
    """A home could not be measured at all (not a timeout: du itself failed)."""


@dataclass(frozen=True)
class Verdict:
    """One citizen's home against its budget, as the last check found it."""

    citizen: str
    used_mb: float | None  # None: not measured within the time bound
    budget_mb: int
    state: str  # ok | near | over | unmeasured
    checked_at: str
    stopped_at: str | None = None  # when the check stopped its unit (kept while over)
    note: str = ""


def state_dir() -> Path:
    """Where verdicts are recorded: `$EXPERIENCE_DISK_STATE`, else root's state
    directory on a server, else `CIV_ROOT/.disk` in dev mode."""
    override = os.environ.get(STATE_ENV)
    if override:
        return Path(override)
    return SERVER_STATE if config.server_mode() else paths.civ_root() / ".disk"


def measure(home: Path, timeout_s: float = MEASURE_TIMEOUT_S) -> int | None:
    """Bytes of disk the tree at `home` uses; None when `du` took longer than `timeout_s`.

    :raises DiskError: du printed no total (the home is gone, du is missing).
    """
    du = shutil.which("du")
    if du is None:
        raise DiskError("du is missing - install coreutils")
    # -P: never follow a link (a citizen's link to / counts as a link); -x: one file
    # system; -B1: bytes of blocks used. Only the total matters: du's complaints about
    # files removed meanwhile are ignored.
    try:
        done = subprocess.run([du, "-s", "-x", "-P", "-B1", "--", str(home)],
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None
    total = done.stdout.split("\t", 1)[0].strip()
    if not total.isdigit():
        raise DiskError(f"du could not measure {home}: {done.stderr.strip()[:300]}")
    return int(total)


def judge(used_bytes: int | None, budget_mb: int) -> str:
    """ok, near (past 90 %), over, or unmeasured - which is enforced as over."""
    if used_bytes is None:
        return "unmeasured"
    if used_bytes > budget_mb * MIB:
        return "over"
    return "near" if used_bytes > NEAR * budget_mb * MIB else "ok"


def budget_mb(name: str) -> tuple[int, str]:
    """The operator's `budget.max_home_mb` for `name` and a note when it is the default."""
    try:
        # On a server the operator's files alone: the citizen writes its config.json.
        cfg = config.load_citizen(name, own=not config.server_mode())
    except ConfigError as exc:
        return Budget.max_home_mb, f"the default budget: {exc}"
    return cfg.budget.max_home_mb, ""


def names() -> list[str]:
    """The citizens to check: on a server every user whose primary group is `citizens`
    (its home's files cannot hide it), in dev mode the homes."""
    if config.server_mode():
        return citizen_users()
    return civilization.citizens()


def check(only: list[str] | None = None, *, enforce: bool = False,
          timeout_s: float = MEASURE_TIMEOUT_S) -> list[Verdict]:
    """Measure and judge every citizen (or `only` these), record each verdict and,
    with `enforce` on a server as root, stop the unit of each one past its budget."""
    out = []
    folder = state_dir()
    # 0755: root writes the verdicts; `citizen status` reads them as anyone.
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    for name in only or names():
        budget, note = budget_mb(name)
        home = paths.citizen_home(name)
        try:
            used = measure(home, timeout_s) if home.is_dir() else 0
        except DiskError as exc:
            used, note = None, str(exc)
        state = judge(used, budget)
        previous = last(name)
        verdict = Verdict(name, None if used is None else round(used / MIB, 1), budget,
                          state, clock.now(), note=note,
                          stopped_at=previous.stopped_at if previous and state in ENFORCED
                          else None)
        if state in ENFORCED:
            verdict = _over(verdict, enforce)
        write_json(folder / f"{name}.json", {"schema_version": 1, **asdict(verdict)},
                   mode=0o644)
        out.append(verdict)
    return out


def _over(verdict: Verdict, enforce: bool) -> Verdict:
    """Stop the units of a citizen past its budget (server, root) and tell the journal:
    its daemon's, and its wake unit under the server's scheduler - which also starts no
    wake while the verdict says stopped (daemon/scheduled.py)."""
    name = verdict.citizen
    used = "more than it can measure in time" if verdict.used_mb is None \
        else f"{verdict.used_mb} MB"
    fix = (f"free space in {paths.citizen_home(name)} or raise budget.max_home_mb in "
           f"{paths.operator_rules_file(name)}, then systemctl start citizen@{name} (under "
           "the scheduler its wakes resume at the next check)")
    if not (enforce and config.server_mode() and os.geteuid() == 0):
        log.warning("citizen %s holds %s of its %d MB disk budget - %s", name, used,
                    verdict.budget_mb, fix)
        return verdict
    for unit in (f"citizen@{name}.service", f"citizen-wake@{name}.service"):
        active = subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False)
        if active.returncode != 0:
            continue  # stopped already (by us, or by the operator), or never started
        # --no-block: the wake in progress finishes as on any stop (up to TimeoutStopSec);
        # the check goes on to the next citizen meanwhile.
        stop = subprocess.run(["systemctl", "stop", "--no-block", unit], check=False,
                              capture_output=True, text=True)
        if stop.returncode != 0:
            log.error("citizen %s is past its disk budget but %s could not be stopped: %s",
                      name, unit, stop.stderr.strip())
            return Verdict(**{**asdict(verdict), "note": f"not stopped: {stop.stderr.strip()}"})
        log.warning("citizen %s holds %s of its %d MB disk budget: %s is stopped - %s",
                    name, used, verdict.budget_mb, unit, fix)
    return Verdict(**{**asdict(verdict), "stopped_at": verdict.stopped_at or clock.now()})


def last(name: str) -> Verdict | None:
    """The last recorded verdict for `name` (None: never checked, or unreadable)."""
    path = state_dir() / f"{paths.check_name(name)}.json"
    try:
        data: dict[str, Any] = dict(read_json(path, 1))
    except (FileNotFoundError, CorruptFile, OSError):
        return None
    data.pop("schema_version", None)
    try:
        return Verdict(**data)
    except TypeError:
        return None
