"""The baseline's main holds only what a review put there (issue 28, break 4).

The baseline repository belongs to the broker's user: no citizen writes its files,
config, hooks or refs. Its `main` moves in two ways only - a release merged by
scripts/setup_server.sh (the `release` branch) and a change the broker merged once its
records showed it verified and held by 2/3 of the citizens. The broker names each merge
in a record of its own, `shared/merged/<change id>.json` (a directory only its user
writes), so anyone can tell a reviewed commit on main from one that was put there some
other way: `unreviewed` lists the latter, and the broker (before a merge) and setup
(before an upgrade) refuse to build on them.

    python -m shared.baseline unreviewed BASELINE SHARED_DIR [RELEASE_COMMIT]

prints them, one per line (what setup_server.sh runs as the broker's user).

On several servers (`remote`, `shared.remote`) the merge record is `merged/<change
id>.json` in the civilization's database, created once by the broker that merged - after
the shared remote took the commit - so every server's broker counts the others' merges
as reviewed and builds on them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from shared import gitsafe
from shared.atomic import CorruptFile, make_dirs, read_json, write_json
from shared.identity import ForgedRecord, check_author, server_mode
from shared.layout import Layout
from shared.remote import Remote

MERGER = "experience-broker"  # the user whose records say a change is in the baseline
RECORD_MODE = 0o644  # everyone reads what the broker merged; only it writes


def merged_path(shared_dir: Path, change_id: str) -> Path:
    return Layout(shared_dir).merged / f"{change_id}.json"  # written by MERGER alone


def merged_key(change_id: str) -> str:
    """The merge record's key in the civilization's database."""
    return f"merged/{change_id}.json"


def read_merged(shared_dir: Path, change_id: str, enforce: bool,
                remote: Remote | None = None) -> dict[str, Any] | None:
    """The broker's record of merging `change_id`, if there is one its user wrote."""
    if remote is not None:
        row = remote.read(merged_key(change_id))
        data = row.get("data") if row is not None else None
        return dict(data) if isinstance(data, dict) else None
    path = merged_path(shared_dir, change_id)
    if not path.is_file():
        return None
    try:
        check_author(path, MERGER, enforce)
        record = read_json(path)
    except (ForgedRecord, CorruptFile):
        return None
    return record if isinstance(record, dict) else None


def write_merged(shared_dir: Path, change_id: str, record: dict[str, Any],
                 remote: Remote | None = None) -> None:
    """The broker's record of a merge (its directory made by setup on a server).

    :raises Taken: on several servers, another broker recorded this change's merge.
    """
    if remote is not None:
        remote.create(merged_key(change_id), record)
        return
    # 0755: the broker's user writes here, everyone reads (dev mode: made on first use).
    make_dirs(Layout(shared_dir).merged, shared_dir, 0o755)
    write_json(merged_path(shared_dir, change_id), record, mode=RECORD_MODE)


def reviewed_commits(shared_dir: Path, enforce: bool,
                     remote: Remote | None = None) -> set[str]:
    """The commits the broker's merge records name: this server's files, and on several
    servers every server's rows too (the files still count: a server that joins a
    civilization keeps the merges it made alone)."""
    found = set() if remote is None else {  # one listing of the folder
        str(r["data"]["baseline_commit"]) for r in remote.records("merged")
        if isinstance(r.get("data"), dict) and isinstance(r["data"].get("baseline_commit"), str)}
    folder = Layout(shared_dir).merged
    if not folder.is_dir():
        return found
    for path in folder.glob("*.json"):
        record = read_merged(shared_dir, path.stem, enforce)
        if record and isinstance(record.get("baseline_commit"), str):
            found.add(record["baseline_commit"])
    return found


def release_commit(baseline: Path) -> str:
    """The baseline's last release ('' when it has none)."""
    done = gitsafe.run(baseline, "rev-parse", "-q", "--verify", "refs/heads/release^{commit}",
                       check=False)
    return done.stdout.decode().strip() if done.returncode == 0 else ""


def unreviewed(baseline: Path, shared_dir: Path, enforce: bool,
               release: str | None = None, remote: Remote | None = None) -> list[str]:
    """Commits on main's first-parent line, after the last release, that neither the
    broker merged nor bring a release in (setup's upgrade merges, the operator's merge of
    `release-next`). `release`: the release commit to count from (default: the branch)."""
    release = release_commit(baseline) if release is None else release
    head = gitsafe.run(baseline, "rev-parse", "-q", "--verify", "refs/heads/main^{commit}",
                       check=False)
    if head.returncode != 0:
        return []  # no main yet: nothing to build on
    line = gitsafe.out(baseline, "rev-list", "--first-parent", "refs/heads/main",
                       *(["--not", release] if release else [])).split()
    merged = reviewed_commits(shared_dir, enforce, remote)
    stray = []
    for commit in line:
        if commit in merged:
            continue
        parents = gitsafe.out(baseline, "rev-list", "--parents", "-n", "1", commit).split()[1:]
        if release and len(parents) == 2 and gitsafe.run(
                baseline, "merge-base", "--is-ancestor", parents[1], release,
                check=False).returncode == 0:
            continue
        stray.append(commit)
    return stray


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or argv[0] != "unreviewed":
        print(__doc__, file=sys.stderr)
        return 2
    baseline, shared = Path(argv[1]), Path(argv[2])
    for commit in unreviewed(baseline, shared, server_mode(shared),
                             argv[3] if len(argv) == 4 else None):
        print(commit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
