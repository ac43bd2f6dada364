"""Atomic, versioned files: the one way state is written, in a citizen's home or the commons.

Write to a temporary file in the same directory, fsync it, `os.replace` it over the
target, then fsync the directory: a reader (or a restart after `kill -9`) sees the
old file or the new one, never a partial one. The first fsync is what makes that hold
across a power loss too (the new name never points at data not yet on disk); the
directory's fsync makes the new name itself durable. A writer under a lock may defer
the directory's fsync until it has let go (`sync_dir=False`, then `fsync_dir`; see
shared/documents.py for why that order is safe). A file that does not parse is an
error naming the file - it is kept for inspection, never silently reset.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from shared import door
from shared.door import NotPlain, TooBig, open_plain, read_tail
from shared.errors import Invalid
from shared.locks import locked

__all__ = ["NotPlain", "TooBig", "open_plain", "read_tail"]  # the door's, re-exported


class CorruptFile(Invalid):
    """A state file exists but cannot be used; it has been left untouched."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem} - the file is kept as it is for inspection; "
                         "restore it from a backup or move it aside to start that state afresh")


def write_bytes(path: Path, data: bytes, mode: int = 0o640,
                owner: tuple[int, int] | None = None, *, sync_dir: bool = True,
                beneath: Path | None = None, durable: bool = True) -> None:
    """Atomically replace `path` with `data`.

    `mode` 0640 by default: owner writes, group `citizens` may read (peer
    monitoring), nobody else. The commons passes 0660 for group-written documents.
    `owner` (uid, gid): root writing on a citizen's behalf hands the file over before
    it becomes visible, so the citizen never meets a file it cannot read.
    `sync_dir=False`: return once the new file is in place, its data on disk, and leave
    the directory's fsync (the rename's durability) to the caller: `fsync_dir(path.parent)`.
    `beneath`: no directory below it is followed through a link (a writer with more
    rights than whoever can write there: root into a home or the commons).
    `durable=False`: no fsync at all - only for derived data whose reader checks it
    against what it derives from (a context's rendered view), so a torn file is a miss.

    Everything happens through descriptors (shared/door.py): the directory is opened
    without following a link, the temp file is created in it O_EXCL|O_NOFOLLOW, its mode
    and owner set with fchmod/fchown, and it is renamed within that directory - so a
    citizen who swaps the temp file for a link, or the folder for one, steers nothing.
    """
    if owner is None and beneath is None:  # our own tree: make what is missing
        path.parent.mkdir(parents=True, exist_ok=True)
    dfd = door.open_dir(path.parent, beneath=beneath)
    try:
        replace_in(dfd, path.name, data, mode, owner, sync_dir=sync_dir and durable,
                   durable=durable)
    finally:
        os.close(dfd)


def replace_in(dfd: int, name: str, data: bytes, mode: int = 0o640,
               owner: tuple[int, int] | None = None, *, sync_dir: bool = True,
               durable: bool = True) -> None:
    """Atomically replace `name` in the open directory `dfd` with `data` (a link at the
    name is replaced, never followed); `write_bytes` through a descriptor."""
    tmp = _temp_in(dfd, name, data, mode, owner, durable=durable)
    try:
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        _unlink_in(dfd, tmp)
        raise
    if sync_dir:
        os.fsync(dfd)


def _temp_in(dfd: int, name: str, data: bytes, mode: int,
             owner: tuple[int, int] | None, *, durable: bool = True) -> str:
    """`data` in a new hidden, fsynced temp file in the directory `dfd`, with `mode` and
    `owner` set through its descriptor; the temp file's name."""
    for _ in range(100):
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        try:  # O_EXCL|O_NOFOLLOW: never opens what someone placed at the name
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dfd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temp name after 100 tries", name)
    try:
        _fill(fd, data, mode, owner, durable)
    except BaseException:
        os.close(fd)
        _unlink_in(dfd, tmp)
        raise
    os.close(fd)
    return tmp


def _fill(fd: int, data: bytes, mode: int, owner: tuple[int, int] | None,
          durable: bool = True) -> None:
    """Give the new file `fd` its mode and owner - through the descriptor: a link swapped
    in at its name is never what is chmodded or chowned - then `data`, fsynced."""
    os.fchmod(fd, mode)
    if owner is not None:
        os.fchown(fd, *owner)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if durable:
        os.fsync(fd)


def _unlink_in(dfd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dfd)


def fsync_dir(directory: Path) -> None:
    """fsync `directory`: a rename or a new name in it is durable only once its entry is."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data: Any, mode: int = 0o640,
               owner: tuple[int, int] | None = None, *, sync_dir: bool = True,
               beneath: Path | None = None) -> bytes:
    """Atomically write `data` as compact JSON (`indent` is 20x slower); return the bytes.
    `sync_dir`, `beneath`: as for `write_bytes`."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    write_bytes(path, raw, mode, owner, sync_dir=sync_dir, beneath=beneath)
    return raw


def create_json(path: Path, data: Any, mode: int = 0o640) -> None:
    """Write `data` to `path` atomically, only if `path` does not exist yet.

    :raises FileExistsError: it exists (a vote, once cast, is never replaced).
    """
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    dfd = door.open_dir(path.parent)
    try:
        tmp = _temp_in(dfd, path.name, raw, mode, None)
        try:  # atomic and exclusive: fails when the name is taken
            os.link(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        finally:
            _unlink_in(dfd, tmp)
        os.fsync(dfd)
    finally:
        os.close(dfd)


def create_beneath(top: Path, rel: str | Path, data: bytes, mode: int = 0o640, *,
                   owner: tuple[int, int] | None = None, dir_mode: int = 0o750) -> Path:
    """Create the new file `top/rel` holding `data`, atomically and exclusively, without
    following a symbolic link anywhere below `top` - for a writer with more rights than
    whoever can write there (root adding a task to a citizen's home, deciding in a
    citizen's thread). Each directory on the way is opened with O_NOFOLLOW (made with
    `dir_mode` and handed to `owner` when missing); the file is born unnamed
    (O_TMPFILE), given its mode and owner through its descriptor, and linked in whole.

    :raises FileExistsError: something (a link included) already has the name.
    :raises Invalid: a directory on the way is a symbolic link or not a directory.
    """
    *dirs, name = Path(rel).parts
    # O_NOFOLLOW on `top` too: only its parents (the caller's own path) are trusted.
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for i, part in enumerate(dirs):
            try:
                os.mkdir(part, dir_mode, dir_fd=fd)
                made = True
            except FileExistsError:
                made = False
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:  # ELOOP / ENOTDIR: a link or a file was planted there
                where = top.joinpath(*dirs[:i + 1])
                raise Invalid(f"{where} is a symbolic link or not a directory; nothing was "
                              "written through it - remove it and try again") from exc
            os.close(fd)
            fd = sub
            if made:
                os.fchmod(fd, dir_mode)  # exactly `dir_mode`: mkdir's is filtered by the umask
                if owner is not None:
                    os.fchown(fd, *owner)  # the home's owner owns what is made in it
        _link_new(fd, name, data, mode, owner)
        os.fsync(fd)  # the new name is durable only once the directory entry is on disk
    finally:
        os.close(fd)
    return top / rel


def _link_new(dir_fd: int, name: str, data: bytes, mode: int,
              owner: tuple[int, int] | None) -> None:
    """`data` as the new file `name` in `dir_fd`: an unnamed file, linked in when whole."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, mode, dir_fd=dir_fd)
    except OSError:  # a filesystem without O_TMPFILE: a fresh temporary name instead
        fd = -1
    tmp = "" if fd >= 0 else f".{name}.{os.urandom(6).hex()}.tmp"
    if tmp:  # O_EXCL|O_NOFOLLOW: never opens what someone placed at the name
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                     dir_fd=dir_fd)
    try:
        _fill(fd, data, mode, owner)
        if tmp:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        else:
            # linkat(AT_SYMLINK_FOLLOW) of /proc/self/fd/N names the unnamed file, and
            # fails when anything (a link included) already has the name.
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)
    finally:
        os.close(fd)
        if tmp:
            os.unlink(tmp, dir_fd=dir_fd)


def read_json(path: Path, schema_version: int | None = None, *,
              cap: int = door.MAX_RECORD, beneath: Path | None = None) -> Any:
    """Read a JSON state file, checking its `schema_version` when one is given: a plain
    file (never through a link, never a FIFO), at most `cap` bytes, nested at most
    door.MAX_JSON_DEPTH deep - so whoever wrote it, its reader is never hung, filled or
    sent into a RecursionError.

    :raises CorruptFile: it does not parse, is too large or too deep, or has another
        schema version (the file is kept).
    :raises NotPlain: a link, a FIFO or not a plain file.
    :raises FileNotFoundError: it does not exist.
    """
    try:
        raw = door.read_capped(path, cap, beneath=beneath)
    except TooBig as exc:
        raise CorruptFile(path, str(exc)) from exc
    return parse_json(path, raw, schema_version)


def parse_json(path: Path, raw: bytes, schema_version: int | None = None) -> Any:
    """`read_json` of bytes already read from `path` (the name is for the error).

    :raises CorruptFile: as `read_json`.
    """
    try:
        data = door.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptFile(path, f"not valid JSON ({exc})") from exc
    if schema_version is not None:
        found = data.get("schema_version") if isinstance(data, dict) else None
        if found != schema_version:
            raise CorruptFile(path, f"schema_version {found!r}, expected {schema_version}")
    return data


MAX_HISTORY = 64 * 1024 * 1024  # a JSONL history read whole: larger ones are read as their tail


def read_jsonl(path: Path, tail_bytes: int | None = None) -> list[Any]:
    """Every whole line of a JSONL history; a torn last line (a killed writer), bytes
    that are not UTF-8 (a stray writer) or a line nested too deep (a planted parser bomb)
    are skipped rather than stopping every reader. Read through the door: never through
    a link or from a FIFO, and at most its last `tail_bytes` (MAX_HISTORY when not
    given: a sparse terabyte planted there fills no reader) - a cut first line is
    skipped as a torn one."""
    return parse_jsonl(read_tail(path, MAX_HISTORY if tail_bytes is None else tail_bytes))


def parse_jsonl(raw: bytes) -> list[Any]:
    """`read_jsonl` of bytes already read: every whole line, the rest skipped."""
    out = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            out.append(door.loads(line))
        except ValueError:
            continue
    return out


def sweep_temp(directory: Path, older_than_s: float = 60.0) -> list[Path]:
    """Remove temp files a killed writer left behind (only old ones: a live writer's are young)."""
    removed = []
    cutoff = time.time() - older_than_s
    for path in directory.rglob(".*.tmp") if directory.is_dir() else ():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:
            continue
    return removed


def make_dirs(path: Path, top: Path | None = None, mode: int = 0o2775) -> list[Path]:
    """Create `path` and its missing parents (those below `top`, if given), each with `mode`.

    The one way a directory is made: mkdir alone would take the umask (0027 drops the
    group's write), so each new directory gets `mode` explicitly - 2775 by default:
    group `citizens` adds files, setgid keeps the group. Two writers making the same
    directory at once is no error (the loser treats the winner's directory as made; it
    was made with the same mode). Returns the directories this call created.
    """
    made: list[Path] = []
    chain = [p for p in (path, *path.parents) if top is None or p.is_relative_to(top)]
    for directory in reversed(chain):
        if directory.is_dir():
            continue
        try:
            directory.mkdir()
        except FileExistsError:  # another writer made it just now (and sets its mode)
            continue
        fd = door.open_dir(directory)  # no link swapped in since mkdir is chmodded
        try:
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        made.append(directory)
    return made


def append_line(path: Path, record: Any, mode: int = 0o640) -> None:
    """Append one JSON line (histories and logs are append-only JSONL)."""
    with Appender(path, mode) as out:
        out.append(record)


APPEND_WAIT_S = 30.0  # a shared history's lock held longer is a peer's, not a writer's


class Appender:
    """One JSONL file held open for many appends (a wake's log: one open, not one per
    line); each `append` is `append_line`'s - locked, a torn last line ended first - and
    `sync` makes them durable. The descriptor is close-on-exec (Python's default): a
    sandboxed command never inherits it; the file is opened without following a link
    and only if it is a regular file (a FIFO planted there fails at once).

    Which lock: a flock needs only a descriptor, so a file peers may read is a file
    they could lock. A file only its owner writes (no group or other write bit: a
    citizen's logs and ledgers) is locked through `.appends.lock` beside it, 0600 -
    only the owner's processes can open it. A history every citizen appends to (0664)
    locks the file itself, and waits at most APPEND_WAIT_S for it: a peer that holds it
    for ever stops that history's writers with an error naming it, not silently."""

    def __init__(self, path: Path, mode: int = 0o640) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.mode = path, mode
        flags = os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:  # read too, to see a torn last line; a file we may only append to is fine
            self.fd, self.readable = os.open(path, os.O_RDWR | flags, mode), True
        except PermissionError:
            self.fd = os.open(path, os.O_WRONLY | flags, mode)
            self.readable = False
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise NotPlain(errno.EINVAL, f"{path} is not a plain file; nothing appended - "
                           "remove it")
        self.private = not mode & 0o022
        self.lock, self.lock_fd = path, self.fd
        if self.private:  # 0600: only the owner's processes can open it, so hold it
            self.lock = path.with_name(".appends.lock")
            try:
                self.lock_fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                                       | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            except OSError:
                os.close(self.fd)
                raise

    def append(self, record: Any) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        fd = self.fd
        # One appender at a time: the torn-line check and the write are one step, so a
        # writer in progress is never mistaken for a torn line.
        with locked(self.lock, lock_file=self.lock, fd=self.lock_fd,
                    timeout=None if self.private else APPEND_WAIT_S):
            info = os.fstat(fd)
            if info.st_size == 0 and info.st_uid == os.geteuid() \
                    and info.st_mode & 0o777 != self.mode:
                os.fchmod(fd, self.mode)  # a new file: open's mode was filtered by the umask
            if self.readable and info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n":
                line = "\n" + line  # a writer killed mid-line: do not glue this record on
            os.write(fd, line.encode())

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
        if self.lock_fd != self.fd:
            os.close(self.lock_fd)

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
