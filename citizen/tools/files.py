"""File tools: read, write and edit files, only inside the citizen's home."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from citizen import config
from citizen.config import paths
from citizen.tools import sandbox
from citizen.tools.base import ToolEnv, ToolFailure, tool
from shared.atomic import write_bytes

MAX_READ = 200_000
# File tools run in the daemon, not in the sandbox, so they refuse what the sandbox hides:
# the kernel's views of processes (/proc/<daemon>/environ), devices, the unit's
# credentials and the operator's directory, whatever the path is called.
NEVER_READ = (Path("/proc"), Path("/sys"), Path("/dev"), Path("/run/credentials"))


def _secret_inodes(env: ToolEnv) -> set[tuple[int, int]]:
    """(device, inode) of every file holding this citizen's secrets: a hard link to one
    has another name but the same inode."""
    found = set()
    for path in (config.secrets_file(env.home.name), env.home.env):
        try:
            st = path.stat() if path is not None else None
        except OSError:
            continue
        if st is not None:
            found.add((st.st_dev, st.st_ino))
    return found


def resolve(env: ToolEnv, path: str, writing: bool = False) -> Path:
    """A path relative to the home (or absolute, inside it); never a secret, never out
    of the home, and writes never to the daemon's own files (its config, state, logs,
    tasks, mail)."""
    home = env.home.dir.resolve()
    target = (home / Path(path).expanduser()).resolve() if not path.startswith("~") else \
        (home / path[1:].lstrip("/")).resolve()
    hidden = (*NEVER_READ, paths.operator_dir())
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if target.name == ".env" or any(target.is_relative_to(h) for h in hidden) or \
            (creds and target.is_relative_to(Path(creds).resolve())):
        raise ToolFailure(f"{path}: secrets, credentials and the kernel's process files are "
                          "never readable or writable by tools")
    try:
        st = target.stat()
    except OSError:
        st = None
    if st is not None and (st.st_dev, st.st_ino) in _secret_inodes(env):
        raise ToolFailure(f"{path} is a link to your secrets; tools never read them")
    # Resolved first (every `..` and link followed), then held to the home: in dev mode
    # the daemon is the developer, whose ~/.ssh a path or a planted link would reach.
    if not target.is_relative_to(home):
        raise ToolFailure(f"{path} is outside your home {home}; the file tools read and "
                          "write only there")
    if writing and target.parent == home and target.name in (*sandbox.HIDDEN_FILES,
                                                             *sandbox.READ_ONLY):
        raise ToolFailure(f"{target.name} is the daemon's (your rules and state); tools "
                          "never write it - the operator edits your rules")
    if writing and any(target.is_relative_to(home / d) for d in ("logs", "tasks", "mail")):
        raise ToolFailure(f"{path}: your logs, tasks and mail are the daemon's records; "
                          "tools never write them")
    return target


@tool(reads=True, cacheable=True)
def read_file(env: ToolEnv, path: str, offset: int = 0, limit: int = 20000) -> str:
    """Read a text file (part of it for large files).

    :param path: file path, relative to your home directory
    :param offset: character offset to start from
    :param limit: how many characters to return
    """
    target = resolve(env, path)
    try:
        # O_NOFOLLOW: the name resolved inside the home must not turn into a link out of
        # it meanwhile; O_NONBLOCK: a FIFO must not hang the daemon.
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ToolFailure(f"no such file: {path}") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToolFailure(f"{path} is not a regular file")
        data = fh.read(MAX_READ + max(offset, 0))
    text = data.decode("utf-8", errors="replace")
    part = text[max(offset, 0): max(offset, 0) + max(1, min(limit, MAX_READ))]
    return part if part else "(empty)"


@tool(writes="path")  # its `path` is a file the task wrote (task evidence)
def write_file(env: ToolEnv, path: str, content: str) -> str:
    """Create or overwrite a text file in your home directory.

    :param path: file path, relative to your home directory
    :param content: the complete new content
    """
    target = resolve(env, path, writing=True)
    write_bytes(target, content.encode(), mode=0o640)
    return f"wrote {len(content)} characters to {target}"


@tool(writes="path")  # its `path` is a file the task wrote (task evidence)
def append_file(env: ToolEnv, path: str, content: str) -> str:
    """Append text to a file in your home directory (creating it): build a large file in
    parts - write_file the first part, then append_file each next one.

    :param path: file path, relative to your home directory
    :param content: the text to add at the end
    """
    target = resolve(env, path, writing=True)
    data = (target.read_bytes() if target.is_file() else b"") + content.encode()
    write_bytes(target, data, mode=0o640)
    return f"appended {len(content)} characters to {target} (now {len(data)} bytes)"


@tool(writes="path")  # its `path` is a file the task wrote (task evidence)
def str_replace_file(env: ToolEnv, path: str, old: str, new: str) -> str:
    """Replace one exact occurrence of a text in a file.

    :param path: file path, relative to your home directory
    :param old: the exact text to replace; must occur exactly once
    :param new: the replacement text
    """
    target = resolve(env, path, writing=True)
    if not target.is_file():
        raise ToolFailure(f"no such file: {path}")
    text = target.read_text(encoding="utf-8")
    count = text.count(old)
    if count != 1:
        raise ToolFailure(f"the text to replace occurs {count} times in {path}; it must occur "
                          "exactly once - include more surrounding text")
    write_bytes(target, text.replace(old, new).encode(), mode=0o640)
    return f"replaced 1 occurrence in {target}"
