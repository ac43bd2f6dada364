"""The one line a person sees when a command fails: what went wrong and what to do.

Our own errors (`CitizenError`, `SharedError`) already name their fix; the system's
common ones get one here; anything else is a bug of ours, said so in one line, with
the traceback behind `-vv`. Exit codes: click's (1 ran and failed, 2 no such thing).
"""

from __future__ import annotations

import errno
import os
import re
import shlex
from collections.abc import Sequence

from citizen.cli.terminal import command
from citizen.config import paths
from citizen.errors import CitizenError
from shared.errors import SharedError


def one_line(exc: BaseException, typed: Sequence[str]) -> str:
    """`exc` as one line naming the fix; `typed` is the command as the person gave it
    (after the group's options), repeated in a hint such as "run it with sudo"."""
    if isinstance(exc, CitizenError | SharedError):  # ours: the message names the fix
        return pasteable(str(exc))
    if isinstance(exc, PermissionError):
        return _denied(exc, typed)
    if isinstance(exc, FileNotFoundError):
        return _missing(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        fix = _FIXES.get(exc.errno or 0, "check the path, the disk and the mount, then run "
                         "the command again")
        return f"{where}{exc.strerror or exc} - {pasteable(fix)}"
    return (f"internal error: {type(exc).__name__}: {exc} (run with -vv for the traceback, "
            "and report it)")


# A command quoted in a message of the layers below the CLI, which cannot know how this
# run was invoked: `citizen init`, not yet carrying --root or the path of `citizen`.
_QUOTED = re.compile(r"`citizen ((?!--root)[^`]*)`")


def pasteable(message: str) -> str:
    """`message` with every quoted `citizen ...` command made runnable as printed
    (terminal.command: --root when one was given, the full path when not on PATH)."""
    return _QUOTED.sub(lambda m: f"`{command(m.group(1))}`", message)


_FIXES = {
    errno.ENOSPC: "the disk is full: free space (`citizen disk check` shows what the citizens use)",
    errno.EDQUOT: "the disk quota is used up: free space (`citizen disk check` shows the budgets)",
    errno.EROFS: "the file system is read-only: remount it read-write",
    errno.ENOTDIR: "a part of the path is a file, not a directory: check the path and --root",
    errno.EISDIR: "it is a directory where a file was expected: check the path",
}


def _denied(exc: PermissionError, typed: Sequence[str]) -> str:
    """Permission denied: on a server the homes, the logs and the operator's files are
    not the invoking user's - the command is root's (the operator's, with sudo)."""
    where = f" on {exc.filename}" if exc.filename else ""
    if os.geteuid() == 0:  # root was refused: a mode, an attribute or a read-only mount
        return (f"permission denied{where}, even as root - check its owner, mode and "
                "attributes (ls -l, lsattr) and the mount")
    again = command(shlex.join(typed))
    if len(typed) > 1 and typed[0] in ("wake", "tool"):  # root may not write a home as its citizen
        return (f"permission denied{where}: `{typed[0]}` runs as the citizen - run it as: "
                f"sudo runuser -u {shlex.quote(typed[1])} -- {again}")
    return (f"permission denied{where}: on a server this command needs root - "
            f"run it as: sudo {again}")


def _missing(exc: FileNotFoundError) -> str:
    """A missing file: the civilization itself, or one file of it."""
    root = paths.civ_root()
    if not root.is_dir():
        return (f"there is no civilization at {root} - create one with "
                f"`{command('init')}`, or give the right --root (or $CIV_ROOT)")
    name = exc.filename or str(exc)
    return (f"{name}: no such file or directory - check the path; `{command('doctor')}` "
            "checks a civilization's files")
