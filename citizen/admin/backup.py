"""Backups that restore: snapshots of every home and the commons, with restic.

Why restic (Debian's `restic`) rather than a format of our own: snapshots are
deduplicated (a month of daily snapshots of mostly unchanged homes costs little more
than one), encrypted, checked by `restic check`, pruned by a retention policy, and a
snapshot exists only once it is complete - a backup killed midway leaves every
earlier snapshot as it was, and the next run completes (`restic unlock` first removes
only locks whose process is gone). borgbackup would do as well; restic is one static
binary with no Python of its own, and its repository can be a plain directory or a
second disk.

A snapshot is taken at the civilization's quiescent point (citizen.home.quiesce): every
daemon is between wakes while it is read. A restore never writes through what a
citizen could have planted: it restores into a root-only directory beside each path,
then moves the old path aside (kept, hidden: `.<name>.before-restore-…`) and the
restored one into place. It holds each citizen's home (contexts,
memory, tasks, logs, its code with its git history), the commons and, on a server,
the operator's directory (rules, secrets: the repository is encrypted).

Progress: `take` and `restore` run their long steps inside `steps.step(label)` (a
`Steps`; the CLI's shows a bar or a heartbeat on a terminal, start and end lines in a
log: citizen/cli/progress.py); the backup feeds it restic's `--json` status lines
(bytes done, total, seconds left). restic 0.14's `restore` reports nothing, so a
restore's steps have no size - one per path restored.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from citizen import civilization
from citizen.admin.status import read_heartbeat
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home import quiesce
from shared import clock
from shared.monitor import alive

TAG = "experience"
KEEP_DAILY, KEEP_WEEKLY = 7, 4
# Also the last few, whatever their day: a snapshot taken by hand never pushes out the
# night's (restic's daily rule keeps only a day's last snapshot).
KEEP_LAST = 3
WAIT_S = 1800.0  # how long a backup waits for running wakes (the wake deadline is 20 min)


class BackupError(CitizenError, RuntimeError):
    """restic failed, or is missing; the message says which and what to do."""


# A step's figures as they come: bytes done, bytes in all, seconds left (None: unknown).
Update = Callable[[float, float, "float | None"], None]


class Steps(Protocol):
    """What shows the progress of long steps (citizen/cli/progress.py for the operator)."""

    every_s: float  # how often it wants figures (restic's status lines)

    def step(self, label: str) -> AbstractContextManager[Update]:
        """Around one step: started, then figures (if its size is known), then done."""
        ...


class Silent:
    """No progress shown (a caller that has no person to show it to)."""

    every_s = 10.0

    def step(self, label: str) -> AbstractContextManager[Update]:
        return nullcontext(_ignore)


def _ignore(done: float, total: float, left_s: float | None) -> None:
    del done, total, left_s


@dataclass(frozen=True)
class Repository:
    """Where snapshots go (`path`) and the key that opens them (`key`)."""

    path: Path
    key: Path

    @classmethod
    def default(cls) -> Repository:
        """`$EXPERIENCE_BACKUP_REPO` / `$EXPERIENCE_BACKUP_KEY`; on a server (civilization
        under /home) /var/backups/experience and /etc/experience/backup.key; in dev
        mode beside the civilization's root (`<root>.backup`, `<root>.backup.key`)."""
        server = paths.civ_root() == Path(paths.DEFAULT_ROOT)
        repo = os.environ.get("EXPERIENCE_BACKUP_REPO") or (
            "/var/backups/experience" if server else f"{paths.civ_root()}.backup")
        key = os.environ.get("EXPERIENCE_BACKUP_KEY") or (
            str(paths.operator_dir() / "backup.key") if server else f"{repo}.key")
        return cls(Path(repo), Path(key))

    def restic(self, *args: str, timeout: float | None = None,
               status: Callable[[dict[str, Any]], None] | None = None,
               every_s: float = 10.0) -> str:
        """Run restic on this repository; its stdout. With `status`, restic's `--json`
        status lines go to it as they come (one each `every_s` seconds), not to stdout.

        :raises BackupError: restic is missing or failed (with its own words).
        """
        exe = shutil.which("restic")
        if exe is None:
            raise BackupError("restic is not installed - apt-get install restic "
                              "(scripts/setup_server.sh installs it on a server)")
        env = {**os.environ, "RESTIC_REPOSITORY": str(self.path),
               "RESTIC_PASSWORD_FILE": str(self.key),
               "RESTIC_PROGRESS_FPS": f"{1 / max(every_s, 0.02):g}",
               "TZ": "UTC"}  # --time and snapshot times are UTC, as every record here
        if status is None:
            done = subprocess.run([exe, *args], env=env, capture_output=True, text=True,
                                  check=False, timeout=timeout)
            returncode, stdout, stderr = done.returncode, done.stdout, done.stderr
        else:
            returncode, stdout, stderr = _streamed([exe, *args], env, status, timeout)
        if returncode != 0:
            raise BackupError(f"restic {args[0]} failed ({returncode}): "
                              f"{stderr.strip()[-400:]}")
        return stdout

    def ensure(self) -> list[str]:
        """Create the key (0600: it opens every snapshot) and the repository if missing."""
        made = []
        if not self.key.exists():
            self.key.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(32) + "\n")
            made.append(f"key {self.key} - keep a copy elsewhere: without it no snapshot "
                        "can be read")
        if not (self.path / "config").exists():
            # 0700: the repository holds every home and the operator's secrets.
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.restic("init")
            made.append(f"repository {self.path}")
        return made


def sources(names: list[str]) -> list[Path]:
    """What a snapshot holds: the citizens' homes, the commons, the operator's dir."""
    found = [paths.citizen_home(n) for n in names]
    found.append(paths.shared_dir())
    operator = paths.operator_dir()
    if operator.is_dir() and os.access(operator, os.R_OK | os.X_OK):
        found.append(operator)
    return [p for p in found if p.exists()]


def take(repo: Repository, *, wait_s: float = WAIT_S, keep_daily: int = KEEP_DAILY,
         keep_weekly: int = KEEP_WEEKLY, steps: Steps | None = None) -> dict[str, Any]:
    """One snapshot at the quiescent point, then the retention policy; a summary."""
    steps = steps or Silent()
    made = repo.ensure()
    repo.restic("unlock")  # only stale locks (a killed run's): a live one is kept
    names = civilization.citizens()
    with ExitStack() as held:
        with steps.step(f"waiting up to {wait_s:g} s for running wakes to end"):
            busy = held.enter_context(quiesce.still(names, wait_s))
        quiet = not busy
        tags = ["--tag", TAG] + ([] if quiet else ["--tag", "not-quiescent"])
        found = sources(names)
        with steps.step(f"snapshot of {len(found)} paths") as update:
            # --time: world time (shared.clock), so retention follows the simulated month.
            out = repo.restic("backup", "--json", *tags, "--time",
                              clock.moment().strftime("%Y-%m-%d %H:%M:%S"),
                              *(str(p) for p in found), status=_figures(update),
                              every_s=steps.every_s)
    summary = next((m for m in map(_json, out.splitlines())
                    if m.get("message_type") == "summary"), {})
    try:
        with steps.step("retention (forget and prune)"):
            repo.restic("forget", "--tag", TAG, "--keep-last", str(KEEP_LAST),
                        "--keep-daily", str(keep_daily), "--keep-weekly", str(keep_weekly),
                        "--prune")
        retention = "applied"
    except BackupError as exc:  # the snapshot is safe; the next run prunes
        retention = f"not applied this time: {exc}"
    return {"snapshot": summary.get("snapshot_id", ""), "quiescent": quiet, "busy": busy,
            "retention": retention,
            "files": summary.get("total_files_processed", 0),
            "bytes": summary.get("total_bytes_processed", 0),
            "added_bytes": summary.get("data_added", 0),
            "seconds": summary.get("total_duration", 0.0), "made": made}


def snapshots(repo: Repository) -> list[dict[str, Any]]:
    """The repository's snapshots, oldest first (empty when there is no repository)."""
    if not (repo.path / "config").exists():
        return []
    found: list[dict[str, Any]] = json.loads(repo.restic("snapshots", "--json") or "[]")
    return found


def verify(repo: Repository, read_share: str = "5%") -> str:
    """`restic check` of the structure, and of a sample of the data itself."""
    return repo.restic("check", f"--read-data-subset={read_share}")


def restore(repo: Repository, snapshot: str, citizen: str | None = None,
            steps: Steps | None = None) -> list[Path]:
    """Put back a snapshot - whole, or one citizen's home - where it was taken; what was
    there is kept beside it (`aside`: `.<name>.before-restore-<time>`).

    :raises BackupError: a daemon of what is restored is running (stop it first).
    """
    names = [paths.check_name(citizen)] if citizen else civilization.citizens()
    running = [n for n in names if _running(n)]
    if running:
        raise BackupError(f"stop {', '.join(running)} first (systemctl stop citizens.target, "
                          "or the `citizen run` processes): a running daemon would write "
                          "into what is restored")
    if citizen:
        targets = [paths.citizen_home(citizen)]
    else:  # everything the snapshot holds, homes of citizens this machine lacks too
        found = json.loads(repo.restic("snapshots", "--json", snapshot) or "[]")
        if not found:
            raise BackupError(f"no snapshot {snapshot!r} in {repo.path} - see `citizen "
                              "backup list`")
        targets = [Path(p) for p in found[-1].get("paths", [])]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    steps = steps or Silent()
    for target in targets:
        with steps.step(f"restoring {target} from {snapshot}"):  # no size: a heartbeat
            _restore_one(repo, snapshot, target, stamp)
    return targets


def aside(target: Path, stamp: str) -> Path:
    """Where what a restore replaced is kept: hidden, so it is no citizen and no commons."""
    return target.with_name(f".{target.name}.before-restore-{stamp}")


def _restore_one(repo: Repository, snapshot: str, target: Path, stamp: str) -> None:
    # Never `--target /`: restic writes through a link a citizen left where a directory
    # was (as root: anywhere). Into a new 0700 directory beside the target instead (same
    # filesystem, so the move is a rename; no citizen can enter it), then two renames -
    # which move a link itself, never what it points to.
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=target.parent))
    try:
        repo.restic("restore", snapshot, "--target", str(staging), "--include", str(target))
        restored = staging / target.relative_to(target.anchor)
        if not restored.exists():
            raise BackupError(f"snapshot {snapshot} holds no {target}")
        if os.path.lexists(target):
            os.rename(target, aside(target, stamp))
        os.rename(restored, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _running(name: str) -> bool:
    try:  # believed only from the citizen's own plain file (citizen/admin/status.py)
        beat = read_heartbeat(paths.home(name))
    except (OSError, ValueError):
        return False
    if beat is None:
        return False
    return beat.get("state") != "stopped" and alive(int(beat.get("pid", 0) or 0))


def _streamed(argv: list[str], env: dict[str, str], status: Callable[[dict[str, Any]], None],
              timeout: float | None) -> tuple[int, str, str]:
    """Run restic, its status lines to `status` as they come; (exit, stdout, stderr)."""
    with tempfile.TemporaryFile("w+") as err:  # a file: a full stderr pipe never blocks it
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        timer = threading.Timer(timeout, proc.kill) if timeout is not None else None
        kept: list[str] = []
        try:
            if timer:
                timer.start()
            for line in proc.stdout or ():
                message = _json(line)
                if message.get("message_type") == "status":
                    status(message)
                else:
                    kept.append(line)
            returncode = proc.wait()
        finally:
            if timer:
                timer.cancel()
            if proc.poll() is None:  # the caller was interrupted: restic goes with it
                proc.kill()
                proc.wait()
        err.seek(0)
        return returncode, "".join(kept), err.read()


def _figures(update: Update) -> Callable[[dict[str, Any]], None]:
    """restic's status line -> (bytes done, bytes in all, seconds left or None)."""
    def status(message: dict[str, Any]) -> None:
        left = message.get("seconds_remaining")
        update(float(message.get("bytes_done", 0) or 0),
               float(message.get("total_bytes", 0) or 0),
               float(left) if isinstance(left, int | float) else None)
    return status


def _json(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
