"""A change's objects, carried from its author's repository to the baseline as a file.

The broker cannot read the homes (0750), so an author bundles its commit - and what the
baseline lacks of its history - into `changes/<id>/change.bundle`, its own file in the
sticky changes folder; the broker, merging, copies it to a private file (its author's
plain file, opened without following links, bounded) and takes the objects from it with
`git bundle unbundle`, whose index-pack hashes every object it stores.

On several servers (`shared.remote`) the bundle is a record field instead, base64, at most
MAX_FAR_BUNDLE bytes (`encode`, `unpack`): a reviewer or a broker on another server cannot
read this server's files, and a record carries what a file's owner proves here - its
author, the kernel's word at the writer's broker - with no second transport to secure.
A change bundled `--not` the baseline is KBs; one bigger than the bound is refused at
announce, naming the fix (rebase on the baseline, or split it).
"""

from __future__ import annotations

import base64
import binascii
import os
import pwd
import stat
import tempfile
from pathlib import Path

from shared import gitsafe, records
from shared.errors import Invalid, NotAllowed, NotFound

BUNDLE = "change.bundle"  # the change's objects, by its author: the broker cannot read homes
MAX_BUNDLE = 64 << 20  # bytes: a change, not a repository's worth of history
# A record is at most 1 MiB of JSON at the broker (citizen.broker.commons.MAX_RECORD);
# base64 is 4/3 of the bytes, so 640 KiB of bundle leaves room for the other fields.
MAX_FAR_BUNDLE = 640 << 10


def publish(repo: Path, head: str, target: Path, top: Path, baseline: Path) -> None:
    """Bundle `head` and what the baseline lacks of its history into `target`."""
    records.make_dirs(target.parent, top)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    _create(repo, tmp, baseline)
    # door: our own new file in a sticky folder, where no peer can swap it.
    os.chmod(tmp, records.RECORD_MODE)  # everyone (the broker too) reads; only we write
    os.replace(tmp, target)


def encode(repo: Path, head: str, change_id: str, baseline: Path) -> str:
    """`head` and what the baseline lacks of its history, bundled, as base64 (a record's
    field on several servers).

    :raises NotAllowed: bigger than MAX_FAR_BUNDLE (the message names the fix).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / BUNDLE
        _create(repo, path, baseline)
        data = path.read_bytes()
    if len(data) > MAX_FAR_BUNDLE:
        raise NotAllowed(f"the objects of {change_id} are {len(data)} bytes bundled; a change "
                         f"travels between servers in at most {MAX_FAR_BUNDLE} - rebase it on "
                         "the baseline (git pull) so only the change is bundled, or split it")
    return base64.b64encode(data).decode()


def _create(repo: Path, tmp: Path, baseline: Path) -> None:
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
        _take(copy, change_id, author, commit, baseline)


def unpack(encoded: object, change_id: str, author: str, commit: str, *, into: Path) -> None:
    """Take a change's objects from its bundle record's base64 (`encode`) into `into`: the
    baseline (the broker merging) or the caller's own repository (a reviewer, an
    adopter). Whose record it is the caller checked (the record's author).

    :raises NotAllowed: no bundle, or bigger than MAX_FAR_BUNDLE.
    :raises NotFound: the bundle lacks the commit, or `into` lacks what it builds on.
    """
    try:
        if not isinstance(encoded, str) or len(encoded) > MAX_FAR_BUNDLE * 4 // 3 + 4:
            raise ValueError("no bundle of the allowed size")
        data = base64.b64decode(encoded, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise NotAllowed(f"the bundle record of {change_id} is no bundle ({exc}); {author} "
                         "announces it again") from exc
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / BUNDLE
        copy.write_bytes(data)
        try:
            _take(copy, change_id, author, commit, into)
        except gitsafe.GitFailed as exc:
            raise NotFound(f"the bundle of {change_id} does not apply to {into} ({exc}) - "
                           f"fetch the baseline there first, or {author} announces it "
                           "again") from exc


def _take(copy: Path, change_id: str, author: str, commit: str, into: Path) -> None:
    # unbundle: index-pack hashes every object it stores (a forged one fails).
    gitsafe.run(into, "bundle", "unbundle", str(copy), umask=0o022)
    if gitsafe.run(into, "cat-file", "-e", f"{commit}^{{commit}}",
                   check=False).returncode != 0:
        raise NotFound(f"the bundle of {change_id} lacks commit {commit[:12]}; "
                       f"{author} announces it again")
