"""A change's objects, carried from its author's repository to the baseline as a file.

The broker cannot read the homes (0750), so an author bundles its commit - and what the
baseline lacks of its history - into `changes/<id>/change.bundle`, its own file in the
sticky changes folder; the broker, merging, copies it to a private file (its author's
plain file, opened without following links, bounded) and takes the objects from it with
`git bundle unbundle`, whose index-pack hashes every object it stores.
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from pathlib import Path

from shared import gitsafe, records
from shared.errors import Invalid, NotAllowed, NotFound

BUNDLE = "change.bundle"  # the change's objects, by its author: the broker cannot read homes
MAX_BUNDLE = 64 << 20  # bytes: a change, not a repository's worth of history


def publish(repo: Path, head: str, target: Path, top: Path, baseline: Path) -> None:
    """Bundle `head` and what the baseline lacks of its history into `target`."""
    records.make_dirs(target.parent, top)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        # What the baseline already has stays out (read as data: git runs in `repo`).
        not_base = ["--not", gitsafe.read_head(baseline)]
        borrow = gitsafe.borrowing(baseline)
    except (NotFound, Invalid):
        not_base, borrow = [], {}
    made = gitsafe.run(repo, "bundle", "create", "--quiet", str(tmp), "HEAD", *not_base,
                       extra_env=borrow, check=False)
    if made.returncode != 0:  # HEAD is in the baseline already: the whole history
        gitsafe.run(repo, "bundle", "create", "--quiet", str(tmp), "HEAD")
    # door: our own new file in a sticky folder, where no peer can swap it.
    os.chmod(tmp, records.RECORD_MODE)  # everyone (the broker too) reads; only we write
    os.replace(tmp, target)


def unbundle(path: Path, change_id: str, author: str, commit: str, *, baseline: Path,
             enforce: bool) -> None:
    """Copy the author's bundle (its own plain file, opened without following links)
    to a private file and take the change's objects from it into the baseline."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NotFound(f"{change_id} has no bundle of its commit ({exc.strerror}); "
                       f"{author} announces it again") from exc
    with os.fdopen(fd, "rb") as fh, tempfile.TemporaryDirectory() as tmp:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 \
                or info.st_size > MAX_BUNDLE:
            raise NotAllowed(f"{path} is not a plain bundle file of at most "
                             f"{MAX_BUNDLE} bytes; {author} announces it again")
        if enforce and info.st_uid != pwd.getpwnam(author).pw_uid:
            raise NotAllowed(f"{path} is not {author}'s file; it is ignored")
        copy = Path(tmp) / BUNDLE
        copy.write_bytes(fh.read(MAX_BUNDLE + 1))
        # unbundle: index-pack hashes every object it stores (a forged one fails).
        gitsafe.run(baseline, "bundle", "unbundle", str(copy), umask=0o022)
    if gitsafe.run(baseline, "cat-file", "-e", f"{commit}^{{commit}}",
                   check=False).returncode != 0:
        raise NotFound(f"the bundle of {change_id} lacks commit {commit[:12]}; "
                       f"{author} announces it again")
