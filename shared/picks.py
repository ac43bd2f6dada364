"""A change's commit picked onto a repository, and how far one is from the baseline.

`shared.evolution`'s git steps on whole repositories: an adopter's cherry-pick into its
own `~/code`, the broker's into the baseline, and the files a repository changed.
"""

from __future__ import annotations

from pathlib import Path

from shared import gitsafe
from shared.changes import Change
from shared.errors import NotAllowed


class AdoptConflict(NotAllowed):
    """A cherry-pick conflicted; it was aborted and the repository left as it was."""


def cherry_pick(repo: Path, change: Change, committer: str) -> str:
    # A finished merge (the upgrade's) leaves .git/AUTO_MERGE: nothing is under way here
    # (a cherry-pick is aborted on conflict), so the leftover goes.
    (repo / ".git" / "AUTO_MERGE").unlink(missing_ok=True)
    # The author stays the change's author; the one applying it commits it.
    who = {"GIT_COMMITTER_NAME": committer, "GIT_COMMITTER_EMAIL": f"{committer}@experience.local"}
    # umask 022: what the broker writes into the baseline every citizen reads, none writes.
    picked = gitsafe.run(repo, "cherry-pick", "--allow-empty", "--keep-redundant-commits",
                         change.commit, extra_env=who, check=False, umask=0o022)
    if picked.returncode != 0:
        conflicted = gitsafe.out(repo, "diff", "--name-only", "--diff-filter=U").split()
        gitsafe.run(repo, "cherry-pick", "--abort", umask=0o022)
        raise AdoptConflict(
            f"{change.id} conflicts with {repo} in {', '.join(conflicted) or '?'}; "
            "the cherry-pick was aborted and nothing changed - resolve by hand or skip it "
            f"({picked.stderr.decode(errors='replace').strip()[:200]})")
    return gitsafe.out(repo, "rev-parse", "HEAD")


def divergence(repo_path: Path, baseline: Path, *, reader: Path | None = None) -> list[str]:
    """Files in which `repo_path` differs from the baseline's head.

    git runs in `reader` (the caller's own repository; default `repo_path` itself) and
    reads `repo_path` and the baseline as object stores: a peer's repository or the
    baseline is never opened by a git process (`shared.gitsafe`).
    """
    reader = reader or repo_path
    head = (gitsafe.out(reader, "rev-parse", "--verify", "HEAD") if repo_path == reader
            else gitsafe.read_head(repo_path))
    return gitsafe.diff_names(reader, (baseline, gitsafe.read_head(baseline)),
                              (repo_path, head))


def same_patch(repo: Path, commit: str, other: str) -> bool:
    """Whether two commits of `repo` change the same lines (git's stable patch id): a
    change's cherry-pick onto the baseline is its commit's patch."""
    def patch_id(c: str) -> str:
        diff = gitsafe.run(repo, "diff-tree", "-p", "--no-color", "--no-commit-id", c).stdout
        return gitsafe.run(repo, "patch-id", "--stable", input=diff).stdout.decode().split(
            " ")[0]

    mine = patch_id(commit)
    return bool(mine) and mine == patch_id(other)
