"""`citizen backup now|list|verify` and `citizen restore`: snapshots with restic."""

from __future__ import annotations

import json
import os
import pwd

import click

from citizen.admin import backup as snapshots_
from citizen.cli import progress
from citizen.cli.options import json_option
from citizen.cli.terminal import age, command, echo, table, wide_option
from citizen.config import paths


@click.group("backup")
def backup() -> None:
    """Snapshots of every home and the commons (restic; DEPLOY.md §6).

    \b
    Where: $EXPERIENCE_BACKUP_REPO, else /var/backups/experience on a server and
    <root>.backup in dev mode; the key: $EXPERIENCE_BACKUP_KEY, else
    /etc/experience/backup.key (server) or <repository>.key - keep a copy elsewhere.
    """


@backup.command("now")
@click.option("--wait", type=float, default=snapshots_.WAIT_S, show_default=True,
              help="Seconds to wait for running wakes before reading anyway.")
@click.option("--keep-daily", type=int, default=snapshots_.KEEP_DAILY, show_default=True)
@click.option("--keep-weekly", type=int, default=snapshots_.KEEP_WEEKLY, show_default=True)
@json_option
def now(wait: float, keep_daily: int, keep_weekly: int, as_json: bool) -> None:
    """Take a snapshot between wakes, then drop those the retention policy lets go.

    Progress on stderr: a bar on a terminal, a line per step otherwise.

    \b
    Examples:
      citizen backup now
      EXPERIENCE_BACKUP_REPO=/mnt/disk2/experience citizen backup now
    """
    repo = snapshots_.Repository.default()
    with progress.steps() as steps:
        done = snapshots_.take(repo, wait_s=wait, keep_daily=keep_daily,
                               keep_weekly=keep_weekly, steps=steps)
    if as_json:
        echo(json.dumps(done, indent=2))
        return
    for line in done["made"]:
        echo(f"created {line}")
    echo(f"snapshot {done['snapshot'][:8]} in {repo.path}: {done['files']} files, "
         f"{done['bytes'] / 2**20:.1f} MB read, {done['added_bytes'] / 2**20:.2f} MB "
         f"added, {done['seconds']:.1f} s"
         + ("" if done["quiescent"] else f" - NOT at a quiescent point: "
                  f"{', '.join(done['busy'])} still working after --wait seconds (tagged "
                  "not-quiescent)"))
    if done["retention"] != "applied":
        echo(f"retention {done['retention']}", err=True)


@backup.command("list")
@wide_option
@json_option
def list_(wide: bool, as_json: bool) -> None:
    """The snapshots, oldest first (their times as ages; ISO with --json)."""
    repo = snapshots_.Repository.default()
    found = snapshots_.snapshots(repo)
    if as_json:
        echo(json.dumps(found, indent=2))
        return
    table(["SNAPSHOT", "TAKEN", "PATHS", "TAGS"],
          [[s["short_id"], age(s.get("time")), len(s.get("paths") or []),
            " ".join(s.get("tags") or []) or "-"] for s in found], wide=wide,
          empty=f"no snapshots in {repo.path} - take one with `{command('backup now')}`")


@backup.command("verify")
@click.option("--read", "read_share", default="5%", show_default=True,
              help="Share of the data to read back and check (e.g. 100%).")
def verify(read_share: str) -> None:
    """Check the repository's structure and read back a sample of its data."""
    repo = snapshots_.Repository.default()
    echo(snapshots_.verify(repo, read_share).strip().splitlines()[-1])


@click.command()
@click.option("--from", "snapshot", required=True, help="A snapshot id (or 'latest').")
@click.option("--citizen", "name", default=None, help="Only this citizen's home.")
def restore(snapshot: str, name: str | None) -> None:
    """Put a snapshot back where it was taken (stop the daemons first).

    Progress on stderr: a heartbeat per path on a terminal, a line per step otherwise.

    \b
    Examples:
      citizen restore --from latest --citizen opus
      citizen restore --from 4f2a9c1e
    """
    repo = snapshots_.Repository.default()
    with progress.steps() as steps:
        restored = snapshots_.restore(repo, snapshot, name, steps=steps)
    for path in restored:
        echo(f"restored {path}")
        if os.geteuid() == 0 and path.parent == paths.civ_root() and (path / "config.json"
                                                                       ).is_file():
            try:
                pwd.getpwnam(path.name)
            except KeyError:  # restored onto a machine that never had this citizen
                echo(f"note: {path.name} has no user here - "
                     f"{command(f'onboard {path.name}')}, then systemctl start "
                     f"citizen@{path.name}")
    echo("what was there before is kept beside each, hidden (.<name>.before-restore-"
         "<time>): remove it once the restored civilization runs")
