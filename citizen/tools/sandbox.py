"""The sandbox every command a model asks for runs in: bubblewrap, with nothing of the
daemon's within reach.

A citizen's model is treated as hostile (prompt-injected, or simply wrong): whatever
its command can reach, a bad wake will eventually reach. So a command sees
- the system read-only (`--ro-bind / /`), a fresh /proc in its own PID namespace (the
  wake and the daemon, and their environments, are not there), its own IPC and UTS
  namespaces, an empty /tmp, and no network unless the citizen's config grants it;
- of the civilization only its own home, its daemon's files masked (the secrets file,
  contexts, memory, logs, tasks, mail and state are empty or absent); peers' homes and
  the commons are not mounted at all;
- writable, only what the caller's `Trust` allows. `Trust.OWN`, the citizen's own model
  (its shell), writes its home - new files and directories at its top level included -
  except the names `reserved` for the daemon and for configuration: every dotname that
  exists and every `KNOWN_DOTNAMES` entry (made empty first if missing, so a mount can
  cover it) is read-only, the daemon's directories are empty tmpfs (made first if
  missing: mail/ before the daemon ever made it), its config read-only. `Trust.PEER`, a
  peer's code (a dynamic tool, a tool review's tests, `code_test` of a change), gets
  the whole home read-only - its `~/code`, dotfiles and everything its daemon reads
  later - and only the caller's scratch `binds` writable;
- rlimits for CPU time, memory, file size and processes; and it dies with its call:
  bubblewrap is PID 1 of the namespace, so nothing it started outlives it.

Why a list of dotnames rather than every one (issue 28): a mount over a name that does
not exist yet must create it in the real home first, and "every dotname" has no end. The
list holds what git, Python, shells and network tools read as configuration; a dotname
outside it is written freely and read by nothing of ours. The daemon never trusts what a
sandbox could write anyway: git runs with a fixed configuration (shared.gitsafe) and
Python ignores the user site (PYTHONNOUSERSITE in the unit). A first version made the
whole top level read-only; it broke ordinary work ("write sorted.txt") - six of the 21
corpus tasks (bench/tasks.py) - so the home stays the citizen's workplace.

EXPERIENCE_SANDBOX says what happens when bubblewrap cannot run here (not installed, or
namespaces forbidden): `required` (what the systemd unit sets, having allowed exactly
bubblewrap's namespaces) refuses commands; `auto` (the default in dev mode) runs them
unconfined and logs a warning once per process; `off` never sandboxes (development
only). `citizen doctor` says which applies and why.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from citizen.config import paths
from citizen.config.paths import Home
from citizen.errors import CitizenError
from citizen.home import state

log = logging.getLogger(__name__)

MODE_ENV = "EXPERIENCE_SANDBOX"  # auto | required | off (see the module doc)
# What of a home a command must not see: the daemon's own state and the citizen's
# secrets. Directories become empty (tmpfs), files unreadable (/dev/null bound over).
HIDDEN_DIRS = ("contexts", "memory", "logs", "tasks", "mail")
HIDDEN_FILES = (".env", "state.json", ".state.lock", ".daemon.lock")
READ_ONLY = ("config.json",)  # the operator's rules: readable, never writable
# What git, Python, shells, ssh and network tools read from a home as configuration:
# made empty (files 0600, directories 0700) before a command of the citizen's own runs,
# so each can be mounted read-only even before the citizen ever had one.
KNOWN_DIRS = (".config", ".local", ".ssh", ".gnupg", ".docker", ".ipython", ".jupyter")
KNOWN_FILES = (".gitconfig", ".git-credentials", ".netrc", ".bashrc", ".profile",
               ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zshenv",
               ".pythonrc.py", ".pypirc", ".pydistutils.cfg", ".npmrc", ".curlrc",
               ".wgetrc", ".inputrc", ".editrc", ".selected_editor")
KNOWN_DOTNAMES = KNOWN_DIRS + KNOWN_FILES
# The directory a command of the citizen's own starts in when the caller names none.
WORK_DIR = "work"


class Trust(StrEnum):
    """Whose code a sandbox runs, which decides what of the home it may write."""

    OWN = "own"  # the citizen's own model (its shell): its work directories, read-write
    PEER = "peer"  # a peer's code (tools, reviews, code_test): nothing of the home


@dataclass(frozen=True)
class Limits:
    """Per-command resource limits (each a ceiling the kernel enforces)."""

    cpu_s: int = 600  # CPU seconds (a busy loop is killed, not the wall-clock timeout)
    memory: int = 4 << 30  # address space, bytes
    file_size: int = 1 << 30  # largest file a command may write (SIGXFSZ past it)
    processes: int = 512  # per user: stops a fork bomb from taking the daemon down


def _python_prefixes() -> list[Path]:
    """Where this interpreter and its libraries live."""
    found: list[Path] = []
    for p in (Path(sys.prefix), Path(sys.base_prefix),
              Path(sys.executable).resolve().parent.parent):
        if p not in found:
            found.append(p)
    return found


def reserved(name: str) -> bool:
    """Whether a top-level name of the home is never a command's to write: a dotname
    (what git, Python, bash and ssh read as configuration) or the daemon's own. The one
    rule for the home's names; the file tools may apply it too."""
    return name.startswith(".") or name in (*HIDDEN_DIRS, *HIDDEN_FILES, *READ_ONLY)


def _prepare(h: Home) -> None:
    """Make every name a mount must cover before a command of the citizen's own runs:
    the daemon's directories and the known dotnames, empty. Never through a link: a name
    that is a symlink is refused (a mount on it would follow it, out of the home).

    :raises OSError: a reserved name is a link (`SandboxRefused`).
    """
    home = h.dir
    state.ensure(h)  # the daemon's state file and its lock: present, so masked
    for name in (*HIDDEN_DIRS, *KNOWN_DIRS, WORK_DIR):
        path = home / name
        if path.is_symlink():
            raise SandboxRefused(f"{path} is a symbolic link: remove it (commands are not "
                                 "run while a name the daemon reads leads elsewhere)")
        if not path.exists():
            # 0700 for configuration, 0750 (like the home) for the rest.
            path.mkdir(mode=0o700 if name.startswith(".") else 0o750)
    for name in (*KNOWN_FILES, ".daemon.lock"):
        try:  # O_EXCL|O_NOFOLLOW: made only if absent, never through a planted link
            os.close(os.open(home / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                             os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            if (home / name).is_symlink():
                raise SandboxRefused(f"{home / name} is a symbolic link: remove it") from None


class SandboxRefused(CitizenError, OSError):
    """A command is not run: the home is not in a state the sandbox can cover."""


def _read_only_dotnames(home: Path) -> list[str]:
    """Every dotname of the home, read-only (the secrets file is masked instead)."""
    out = []
    for entry in sorted(os.scandir(home), key=lambda e: e.name):
        if entry.name.startswith(".") and entry.name not in HIDDEN_FILES \
                and not entry.is_symlink():
            out += ["--ro-bind", entry.path, entry.path]
    return out


def _masks(home: Path) -> list[str]:
    """What of the home a command must not see (it can write none of it: the home's top
    level is read-only), and the interpreter that must come back."""
    h, args = str(home), []
    for name in HIDDEN_DIRS:
        if (home / name).is_dir():
            args += ["--tmpfs", f"{h}/{name}"]  # empty, and what is written there vanishes
    for name in HIDDEN_FILES:
        if (home / name).exists():
            args += ["--ro-bind", "/dev/null", f"{h}/{name}"]
    for name in READ_ONLY:
        if (home / name).exists() and not (home / name).is_symlink():
            args += ["--ro-bind", f"{h}/{name}", f"{h}/{name}"]  # readable, not writable
    # The interpreter a command may run (a peer's tool tests run sys.executable): when it
    # lives where the sandbox mounts an empty tmpfs (a checkout under /tmp), it comes
    # back read-only.
    emptied = (Path("/tmp"), Path("/run"), paths.civ_root())  # noqa: S108 - as masked
    for prefix in _python_prefixes():
        if any(prefix.is_relative_to(e) for e in emptied):
            args += ["--ro-bind", str(prefix), str(prefix)]
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if creds and Path(creds).is_dir():
        args += ["--tmpfs", creds]  # the unit's credentials: the daemon's, never a command's
    return args


def bwrap() -> str | None:
    """The bubblewrap binary, if installed."""
    return shutil.which("bwrap")


def mode() -> str:
    value = os.environ.get(MODE_ENV, "auto")
    return value if value in ("auto", "required", "off") else "required"  # unknown: safest


@functools.cache
def _probe(binary: str) -> str:
    """Why bubblewrap cannot make its namespaces here ("" when it can)."""
    try:
        done = subprocess.run([binary, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net",
                               "--unshare-ipc", "--unshare-uts", "--proc", "/proc",
                               "--dev", "/dev", "true"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


def problem() -> str:
    """Why commands cannot be sandboxed here ("" when they can)."""
    binary = bwrap()
    if binary is None:
        return "bubblewrap is not installed (apt-get install bubblewrap)"
    why = _probe(binary)
    return f"bubblewrap cannot make its namespaces here: {why}" if why else ""


def refusal() -> str:
    """Why a command must be refused now ("" when it may run, boxed or not)."""
    if mode() != "required":
        return ""
    why = problem()
    return f"{why}; commands are refused while {MODE_ENV}=required" if why else ""


def confined() -> bool:
    """Whether commands run in bubblewrap now (a warning, once, when they cannot)."""
    if mode() == "off":
        return False
    why = problem()
    if why:
        _warn_once(why)
    return not why


@functools.cache
def _warn_once(why: str) -> None:
    log.warning("commands run UNCONFINED: %s (set %s=required to refuse them instead)",
                why, MODE_ENV)


def wrap(home: Home, argv: list[str], *, trust: Trust, network: bool = False,
         limits: Limits = Limits(), binds: tuple[Path, ...] = (),
         chdir: Path | None = None) -> list[str]:
    """`argv` as it runs in the sandbox of citizen `home`, under `limits` (unconfined but
    limited when the sandbox cannot run and the mode allows that). `trust`: whose code
    this is (`Trust.PEER` for anything a peer wrote; see the module doc). `binds`: more
    directories the command may write (a review's scratch worktree), `chdir` where it
    starts (default: the home)."""
    # prlimit, not a preexec_fn: the daemon has threads, and forking code must not run
    # Python between fork and exec.
    limited = ["prlimit", f"--cpu={limits.cpu_s}", f"--as={limits.memory}",
               f"--fsize={limits.file_size}", f"--nproc={limits.processes}", "--"]
    binary = bwrap()
    if not confined() or binary is None:
        return [*limited, *argv]
    h = str(home.dir)
    if trust is Trust.OWN:
        _prepare(home)
    args = [*limited, binary, "--ro-bind", "/", "/",
            "--tmpfs", "/tmp",  # noqa: S108 - a private, empty /tmp inside the sandbox
            "--tmpfs", str(paths.civ_root()),  # peers' homes and the commons vanish ...
            # ... and this home comes back: the citizen's own shell writes it (but what is
            # reserved, below); a peer's code gets it read-only.
            "--bind" if trust is Trust.OWN else "--ro-bind", h, h,
            "--proc", "/proc", "--dev", "/dev",
            # No host sockets: /run holds the system bus, Dovecot's and other services'
            # Unix sockets, which a read-only mount does not stop connect() to.
            "--tmpfs", "/run",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent",  # the wake's call ends: everything in here ends
            "--new-session"]  # no TIOCSTI into a terminal the daemon may hold
    if not network:
        args.append("--unshare-net")  # only loopback, and nothing listens there
    elif Path("/run/systemd/resolve").is_dir():
        # /etc/resolv.conf may point into /run: name resolution for permitted network
        args += ["--ro-bind", "/run/systemd/resolve", "/run/systemd/resolve"]
    if trust is Trust.OWN:
        # What git, Python and the shells read later, read-only even to the citizen's
        # own commands; a peer's code gets the whole home so: a change under review would
        # otherwise land in ~/code, which the daemon imports at its next start.
        args += _read_only_dotnames(home.dir)
    args += _masks(home.dir)
    for extra in binds:
        args += ["--bind", str(extra), str(extra)]  # the caller's scratch: the one writable
    return [*args, "--chdir", str(chdir or home.dir), "--", *argv]
