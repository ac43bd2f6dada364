"""File tools: read, write and edit files. Writes stay inside the citizen's home."""

from __future__ import annotations

from pathlib import Path

from citizen.tools.base import ToolEnv, ToolFailure, tool
from shared.atomic import write_bytes

MAX_READ = 200_000


def resolve(env: ToolEnv, path: str, writing: bool = False) -> Path:
    """A path relative to the home (or absolute); never a `.env`, writes only in the home."""
    home = env.home.dir.resolve()
    target = (home / Path(path).expanduser()).resolve() if not path.startswith("~") else \
        (home / path[1:].lstrip("/")).resolve()
    if target.name == ".env":
        raise ToolFailure("secrets files (.env) are never readable or writable by tools")
    if writing and not target.is_relative_to(home):
        raise ToolFailure(f"{path} is outside your home {home}; you may only write there")
    return target


@tool
def read_file(env: ToolEnv, path: str, offset: int = 0, limit: int = 20000) -> str:
    """Read a text file (part of it for large files).

    :param path: file path, relative to your home directory
    :param offset: character offset to start from
    :param limit: how many characters to return
    """
    target = resolve(env, path)
    if not target.is_file():
        raise ToolFailure(f"no such file: {path}")
    data = target.read_bytes()[: MAX_READ + max(offset, 0)]
    text = data.decode("utf-8", errors="replace")
    part = text[max(offset, 0): max(offset, 0) + max(1, min(limit, MAX_READ))]
    return part if part else "(empty)"


@tool
def write_file(env: ToolEnv, path: str, content: str) -> str:
    """Create or overwrite a text file in your home directory.

    :param path: file path, relative to your home directory
    :param content: the complete new content
    """
    target = resolve(env, path, writing=True)
    write_bytes(target, content.encode(), mode=0o640)
    return f"wrote {len(content)} characters to {target}"


@tool
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
