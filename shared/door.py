"""The one door for trusted code into places a citizen can write.

Root's CLI, root's approval helper, the web user, the scheduler and the broker all read
what citizens wrote - heartbeats, ledgers, histories, views, logs, requests - and root
writes into a citizen's doorbell, task queue and the commons. A citizen prepares those
places as it likes: a link where a file was, a FIFO, a sparse file of a terabyte, a line
of a hundred thousand `[`, a gzip bomb, a folder renamed away and a link in its place.
So every such access goes through here:

- **Paths are walked, never resolved.** A directory is opened without following a link
  (`O_NOFOLLOW | O_DIRECTORY`); with `beneath=TOP`, so is every component below `TOP`
  (TOP itself is the caller's own, trusted path). Everything after is relative to the
  open descriptor (`dir_fd=`), so a name swapped after the check changes nothing. One
  walk, the same on every kernel (openat2's RESOLVE_NO_SYMLINKS would save a few system
  calls; the per-component walk is what it does, and it is one code path to test).
- **Files are data, bounded.** Only a regular file is read (a FIFO, device or link is
  refused at once: `O_NONBLOCK | O_NOFOLLOW`, then `fstat`), at most `cap` bytes, JSON
  at most MAX_JSON_DEPTH deep, a gzip stream at most `cap_out` bytes once inflated.
- **Modes and owners go through the descriptor** (`fchmod`, `fchown`), never a name a
  link could redirect (shared/atomic.py's writes).

tests/test_door.py performs each attack; tests/test_door_ast.py holds every trusted
module to this door.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import zlib
from pathlib import Path
from typing import IO, Any, BinaryIO

MAX_JSON_DEPTH = 64  # our deepest record nests 8; deeper is a planted parser bomb
MAX_RECORD = 16 * 1024 * 1024  # the default cap of a JSON file a citizen wrote
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class NotPlain(OSError):
    """A path that is a link, a FIFO, a device or a directory, where a plain file was read."""


class TooBig(NotPlain):
    """A file (or what it inflates to) larger than its reader's cap."""


def _walk_error(where: Path, exc: OSError) -> OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return NotPlain(exc.errno, f"{where} is a symbolic link or not a directory; nothing "
                        "was read or written through it - remove it and try again")
    return exc


def open_dir(path: Path, *, beneath: Path | None = None) -> int:
    """A descriptor of the directory `path`, opened without following a link at its last
    component - and, with `beneath`, at every component below `beneath`. The caller
    closes it.

    :raises NotPlain: a component is a link or not a directory.
    :raises OSError: missing or unreadable.
    """
    if beneath is None:
        try:
            return os.open(path, _DIR_FLAGS)
        except OSError as exc:
            raise _walk_error(path, exc) from exc
    rel = path.relative_to(beneath)  # ValueError: `path` is not below its trusted top
    fd = os.open(beneath, _DIR_FLAGS)
    try:
        for i, part in enumerate(rel.parts):
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _walk_error(beneath.joinpath(*rel.parts[:i + 1]), exc) from exc
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_plain(path: Path, *, beneath: Path | None = None) -> BinaryIO:
    """`path` opened for reading if it is a plain file - for a reader more privileged than
    the file's writer: no link is followed (at the file, or below `beneath`), a FIFO
    fails at once instead of hanging the reader.

    :raises NotPlain: a link or anything but a plain file. :raises OSError: cannot be opened.
    """
    dfd = open_dir(path.parent, beneath=beneath) if beneath is not None else None
    try:
        fd = os.open(path.name if dfd is not None else path, _FILE_FLAGS, dir_fd=dfd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise NotPlain(exc.errno, f"{path} is a symbolic link, not a plain file") from exc
        raise
    finally:
        if dfd is not None:
            os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotPlain(errno.EINVAL, f"{path} is not a plain file")
    return os.fdopen(fd, "rb")


def owner_of(f: IO[Any] | int) -> int:
    """The uid that owns an open file: the kernel's word on who wrote it."""
    return os.fstat(f if isinstance(f, int) else f.fileno()).st_uid


def read_capped(path: Path, cap: int = MAX_RECORD, *, beneath: Path | None = None,
                owner: int | None = None) -> bytes:
    """A whole plain file of at most `cap` bytes (`owner`: it must be that uid's).

    :raises TooBig: larger than `cap` (nothing of it was read).
    :raises NotPlain: a link, a FIFO, not a plain file, or not `owner`'s.
    """
    with open_plain(path, beneath=beneath) as f:
        info = os.fstat(f.fileno())
        if owner is not None and info.st_uid != owner:
            raise NotPlain(errno.EPERM, f"{path} is owned by uid {info.st_uid}, not its "
                           f"writer's ({owner}): written by someone else, not believed")
        if info.st_size > cap:
            raise TooBig(errno.EFBIG, f"{path} holds {info.st_size} bytes, more than the "
                         f"{cap} its reader takes - not read; move it aside")
        data = f.read(min(info.st_size, cap) + 1)  # not the cap: read(n) allocates n
    if len(data) > cap:  # it grew while we read
        raise TooBig(errno.EFBIG, f"{path} grew past {cap} bytes while read - not read")
    return data


def read_tail(path: Path, cap: int) -> bytes:
    """A file another user wrote, as data: its last `cap` bytes at most (never through a
    link, never from a FIFO). The writer may plant a sparse file of any size; the
    reader's memory may be everyone's.

    :raises OSError: absent, unreadable, or not a plain file (NotPlain)."""
    with open_plain(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > cap:
            f.seek(size - cap)
        return f.read(cap)


def loads(raw: bytes | str, depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON that a citizen may have written: nested at most `depth` deep.

    :raises ValueError: not JSON, not UTF-8, or nested deeper (a line of a hundred
        thousand `[` raised RecursionError in every reader, root's decisions included).
    """
    try:
        data = json.loads(raw)
    except RecursionError as exc:
        raise ValueError(f"JSON nested deeper than this reader takes ({depth})") from exc
    text = raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace")
    if _looks_deeper(text, depth) and _depth(data, depth) > depth:
        raise ValueError(f"JSON nested deeper than {depth}")
    return data


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[[\]}]|\{[\]}]")  # an opener and the closer right after it


def _looks_deeper(text: bytes, depth: int) -> bool:
    """Whether `text`'s brackets nest deeper than `depth`, in C: each round removes the
    innermost pairs, so data nested n deep is gone after n rounds (a few for ours).
    Brackets inside strings can only make it look deeper: then the exact walk decides."""
    if text.count(b"[") + text.count(b"{") <= depth:  # two counts: most text stops here
        return False
    brackets = text.translate(None, _NOT_BRACKETS)
    for rounds in range(depth + 2):
        if not brackets:
            return rounds > depth
        if rounds + len(brackets) <= depth:  # what is left cannot nest deeper than that
            return False
        brackets = _INNERMOST.sub(b"", brackets)
    return True


def _depth(value: Any, limit: int) -> int:
    """How deep `value` nests, counting up to `limit` + 1 (iterative: no recursion)."""
    if not isinstance(value, dict | list):
        return 0
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
                    if isinstance(v, dict | list))
    return deepest


def gunzip_capped(path: Path, cap_in: int, cap_out: int) -> bytes:
    """A gzip file a citizen wrote, inflated: at most `cap_in` bytes read, at most
    `cap_out` bytes out (a 1 MB bomb inflates to gigabytes).

    :raises TooBig: either cap passed. :raises NotPlain: not a plain file.
    :raises ValueError: not a gzip stream.
    """
    raw = read_capped(path, cap_in)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # 16+: the gzip header and trailer
    try:
        out = inflate.decompress(raw, cap_out + 1)
    except zlib.error as exc:
        raise ValueError(f"{path} is not a gzip stream ({exc})") from exc
    if len(out) > cap_out or inflate.unconsumed_tail:
        raise TooBig(errno.EFBIG, f"{path} inflates past {cap_out} bytes - not read")
    return out


def listdir(path: Path, *, beneath: Path | None = None) -> list[str]:
    """The names in the directory `path`, opened without following a link (sorted)."""
    fd = open_dir(path, beneath=beneath)
    try:
        return sorted(os.listdir(fd))  # noqa: PTH208 - the descriptor, not a name swapped since
    finally:
        os.close(fd)
