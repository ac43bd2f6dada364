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

import errno
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

from shared.errors import Invalid
from shared.locks import locked


class CorruptFile(Invalid):
    """A state file exists but cannot be used; it has been left untouched."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem} - the file is kept as it is for inspection; "
                         "restore it from a backup or move it aside to start that state afresh")


def write_bytes(path: Path, data: bytes, mode: int = 0o640,
                owner: tuple[int, int] | None = None, *, sync_dir: bool = True) -> None:
    """Atomically replace `path` with `data`.

    `mode` 0640 by default: owner writes, group `citizens` may read (peer
    monitoring), nobody else. The commons passes 0660 for group-written documents.
    `owner` (uid, gid): root writing on a citizen's behalf hands the file over before
    it becomes visible, so the citizen never meets a file it cannot read.
    `sync_dir=False`: return once the new file is in place, its data on disk, and leave
    the directory's fsync (the rename's durability) to the caller: `fsync_dir(path.parent)`.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_copy(path, data, mode)
    try:
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def _temp_copy(path: Path, data: bytes, mode: int) -> str:
    """`data` in a hidden, fsynced temp file beside `path`, with `mode`; its name."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # mkstemp creates 0600; set the intended mode before it is visible
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def fsync_dir(directory: Path) -> None:
    """fsync `directory`: a rename or a new name in it is durable only once its entry is."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, data: Any, mode: int = 0o640,
               owner: tuple[int, int] | None = None, *, sync_dir: bool = True) -> bytes:
    """Atomically write `data` as compact JSON (`indent` is 20x slower); return the bytes.
    `sync_dir`: as for `write_bytes`."""
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    write_bytes(path, raw, mode, owner, sync_dir=sync_dir)
    return raw


def create_json(path: Path, data: Any, mode: int = 0o640) -> None:
    """Write `data` to `path` atomically, only if `path` does not exist yet.

    :raises FileExistsError: it exists (a vote, once cast, is never replaced).
    """
    raw = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    tmp = _temp_copy(path, raw, mode)
    try:
        os.link(tmp, path)  # atomic and exclusive: fails when the name is taken
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(path.parent)


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
        os.fchmod(fd, mode)  # through the descriptor: no name a planted link could redirect
        if owner is not None:
            os.fchown(fd, *owner)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
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


class NotPlain(OSError):
    """A path that is a link, a FIFO, a device or a directory, where a plain file was read."""


def open_plain(path: Path) -> BinaryIO:
    """`path` opened for reading if it is a plain file - for a reader more privileged than
    the file's writer (root reading a citizen's files): O_NOFOLLOW, so a planted link does
    not lead it to a file the writer cannot read, and O_NONBLOCK, so a FIFO does not hang it.

    :raises NotPlain: a link or anything but a plain file. :raises OSError: cannot be opened.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise NotPlain(exc.errno, f"{path} is a symbolic link, not a plain file") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotPlain(errno.EINVAL, f"{path} is not a plain file")
    return os.fdopen(fd, "rb")


def read_tail(path: Path, cap: int) -> bytes:
    """A file another user wrote, as data: its last `cap` bytes at most, opened with
    `open_plain` (a link is not followed, a FIFO fails at once instead of hanging). The
    writer may plant a sparse file of any size; the reader's memory may be everyone's.

    :raises OSError: absent, unreadable, or not a plain file (NotPlain)."""
    with open_plain(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > cap:
            f.seek(size - cap)
        return f.read(cap)


def read_json(path: Path, schema_version: int | None = None) -> Any:
    """Read a JSON state file, checking its `schema_version` when one is given.

    :raises CorruptFile: it does not parse, or has another schema version.
    :raises FileNotFoundError: it does not exist.
    """
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptFile(path, f"not valid JSON ({exc})") from exc
    if schema_version is not None:
        found = data.get("schema_version") if isinstance(data, dict) else None
        if found != schema_version:
            raise CorruptFile(path, f"schema_version {found!r}, expected {schema_version}")
    return data


def read_jsonl(path: Path, tail_bytes: int | None = None) -> list[Any]:
    """Every whole line of a JSONL history; a torn last line (a killed writer) or bytes
    that are not UTF-8 (a stray writer) are skipped rather than stopping every reader.
    `tail_bytes`: a peer's file, read as `read_tail` reads it - its end only, never
    through a link or from a FIFO (a cut first line is skipped as a torn one)."""
    raw = path.read_bytes() if tail_bytes is None else read_tail(path, tail_bytes)
    out = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
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
        os.chmod(directory, mode)
        made.append(directory)
    return made


def append_line(path: Path, record: Any, mode: int = 0o640) -> None:
    """Append one JSON line (histories and logs are append-only JSONL)."""
    with Appender(path, mode) as out:
        out.append(record)


class Appender:
    """One JSONL file held open for many appends (a wake's log: one open, not one per
    line); each `append` is `append_line`'s - locked, a torn last line ended first - and
    `sync` makes them durable. The descriptor is close-on-exec (Python's default): a
    sandboxed command never inherits it."""

    def __init__(self, path: Path, mode: int = 0o640) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.mode = path, mode
        try:  # read too, to see a torn last line; a file we may only append to is fine
            self.fd, self.readable = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT,
                                             mode), True
        except PermissionError:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
            self.readable = False

    def append(self, record: Any) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        fd = self.fd
        # One appender at a time: the torn-line check and the write are one step, so a
        # writer in progress is never mistaken for a torn line. The one lock, on the very
        # descriptor we write through (a file we may only append to still locks).
        with locked(self.path, lock_file=self.path, fd=fd):
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

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
