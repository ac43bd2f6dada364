"""The one way the daemon and the commons run git (DESIGN §11-12, issue 28).

A citizen's sandbox can write its home (`~/.gitconfig`, `~/.config/git/`) and its own
`~/code/.git` (config, hooks, info/attributes); a peer's repository is its peer's. So
whatever git reads from those places is data, never a command: every git call here runs
with

- no system or global configuration (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`),
- a fixed command-line configuration (`GIT_CONFIG_COUNT`, which beats the repository's
  own config for single-valued keys) switching off what a repository config can make
  git execute: fsmonitor, hooks, pager, editors, signing, ssh, other transports, auto
  gc, submodule recursion,
- every filter, merge and diff driver the repository's effective config defines (listed
  in the same git context just before the call) overridden: filters empty (measured on
  git 2.39.5: an empty clean/smudge/process runs nothing and passes content through),
  merge drivers `false` (a conflict: adoption fails closed), textconv/diff commands
  empty (git then fails instead of running anything),
- explicit `GIT_DIR` and `GIT_WORK_TREE` (a planted `core.worktree` cannot move the
  checkout into someone's home).

**A peer's repository is only ever read as data**, never opened by a git process: its
objects are reachable through `GIT_ALTERNATE_OBJECT_DIRECTORIES` from a git running in
the caller's OWN repository (`import_commit`, `diff_names`), and its HEAD is parsed from
files (`read_head`). Measured on git 2.39.5 before deciding (two Unix users, a source
repository with core.fsmonitor, hooks, uploadpack.packObjectsHook, alternateRefsCommand,
sshCommand, pager, diff.external and filters planted in .git/config):

- `git fetch /home/opus/code <sha>` runs `git-upload-pack` and `pack-objects` with their
  working directory in opus's .git, as the caller (strace). upload-pack refuses a
  repository of another owner unless safe.directory is in system or global config; the
  caller's `-c` and GIT_CONFIG_COUNT do not reach it (the local transport clears them).
- Declared safe, none of the planted repository settings ran; but the caller's global
  config does reach upload-pack: an `uploadpack.packObjectsHook` in the caller's
  ~/.gitconfig (sandbox-writable) ran during the fetch. And every setting git adds later
  would apply to a peer-controlled config again.
- Through alternates no git process enters the peer's repository (strace), no
  safe.directory is needed, and `index-pack` re-hashes every object it stores, so a
  forged loose object cannot pass as the announced commit.
- An explicit GIT_DIR skips git's ownership check altogether: that is why this module
  is never pointed at a peer's repository, and why no home needs a safe.directory entry.

The shared repositories (`shared/baseline`, `shared/world`) belong to the broker's user
and nobody else writes them (issue 28, break 4): their config, hooks and refs are the
broker's, and this module's settings are the second line.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

from shared.errors import Invalid, NotFound, SharedError

TIMEOUT_S = 300  # a FIFO planted as a ref or an object file must not hang the daemon
_HEX = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_REF = re.compile(r"refs/[A-Za-z0-9._/-]+")
_MAX_REF_FILE = 1 << 20  # packed-refs of a normal repository is far smaller

# Command-line configuration beats the repository's; each entry closes one way a
# repository or home config makes git execute something.
FIXED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),  # a hook command git runs on every index refresh
    ("core.hooksPath", "/dev/null"),  # .git/hooks is sandbox-writable (reference-transaction)
    ("core.pager", "cat"), ("core.editor", ":"), ("sequence.editor", ":"),
    ("core.sshCommand", "false"), ("core.askPass", ""), ("credential.helper", ""),
    ("protocol.allow", "never"),  # no transport but local paths (setup's clone)
    ("protocol.file.allow", "always"),
    ("commit.gpgSign", "false"), ("tag.gpgSign", "false"),  # gpg.program is repo config
    ("log.showSignature", "false"),  # `git show` would run gpg.program to verify
    ("core.attributesFile", "/dev/null"), ("core.excludesFile", "/dev/null"),  # home files
    ("gc.auto", "0"), ("maintenance.auto", "false"),  # nothing left running after a call
    ("submodule.recurse", "false"),  # a submodule is another repository with its own config
)
FIXED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",  # no config from the home
    "GIT_CONFIG_PARAMETERS": "",  # nothing inherited beside our own GIT_CONFIG_COUNT
    "GIT_EDITOR": ":", "GIT_SEQUENCE_EDITOR": ":", "GIT_PAGER": "cat", "PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",  # a commit peers verified means that commit, not a stand-in
}
# What each driver section may make git execute, and the value that runs nothing.
_DRIVER_KEYS = {"filter": {"clean": "", "smudge": "", "process": "", "required": "false"},
                "merge": {"driver": "false"},
                "diff": {"textconv": "", "command": ""}}


class GitFailed(SharedError, RuntimeError):
    """A git command failed; the message carries its stderr."""


def _config_env(pairs: list[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def _base_env() -> dict[str, str]:
    # The daemon's own environment minus anything of git's: only what is set here counts.
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def _repo_env(repo: Path) -> dict[str, str]:
    return {"GIT_DIR": str(repo / ".git"), "GIT_WORK_TREE": str(repo)}


def _driver_overrides(repo: Path) -> list[tuple[str, str]]:
    """Neutral values for every driver key the repository's effective config defines.

    Listed in the very context the next call runs in (same GIT_DIR, fixed config), so
    includes and includeIf resolve as they will for that call.
    """
    listing = subprocess.run(
        ["git", "config", "--list", "--name-only", "-z"], capture_output=True, check=False,
        timeout=TIMEOUT_S,
        env={**_base_env(), **FIXED_ENV, **_repo_env(repo), **_config_env(list(FIXED_CONFIG))})
    if listing.returncode != 0:
        raise GitFailed(f"cannot read the git config of {repo}: "
                        f"{listing.stderr.decode(errors='replace').strip()[-300:]}")
    overrides: dict[str, str] = {}
    for name in listing.stdout.decode(errors="surrogateescape").split("\0"):
        section, _, rest = name.partition(".")
        driver = rest.rpartition(".")[0]
        keys = _DRIVER_KEYS.get(section.lower())
        if keys and driver:
            for k, neutral in keys.items():
                overrides[f"{section}.{driver}.{k}"] = neutral
    return sorted(overrides.items())


def environment(repo: Path) -> dict[str, str]:
    """The environment entries for a git call in `repo` (the caller's own, or a commons
    repository): fixed config, every driver neutralised, explicit GIT_DIR/GIT_WORK_TREE.
    """
    pairs = list(FIXED_CONFIG) + _driver_overrides(repo)
    return {**FIXED_ENV, **_repo_env(repo), **_config_env(pairs)}


def run(repo: Path | None, *args: str, cwd: Path | None = None,
        extra_env: dict[str, str] | None = None, input: bytes | None = None,
        check: bool = True, umask: int = -1) -> subprocess.CompletedProcess[bytes]:
    """Run `git args` in `repo` (None: no repository yet, as for init and clone, in `cwd`).
    `umask`: the file mode mask git creates files with (-1: this process's).

    :raises GitFailed: git exited non-zero (with check) or ran past TIMEOUT_S.
    """
    env = {**_base_env(), **FIXED_ENV, **_config_env(list(FIXED_CONFIG))}
    if repo is not None:
        env.update(environment(repo))
    env.update(extra_env or {})
    try:
        done = subprocess.run(["git", *args], cwd=cwd or repo, env=env, input=input,
                              capture_output=True, check=False, timeout=TIMEOUT_S,
                              umask=umask)
    except subprocess.TimeoutExpired as exc:
        raise GitFailed(f"git {args[0]} in {repo or cwd} ran past {TIMEOUT_S} s") from exc
    if check and done.returncode != 0:
        raise GitFailed(f"git {' '.join(args[:2])} in {repo or cwd} failed: "
                        f"{done.stderr.decode(errors='replace').strip()[-300:]}")
    return done


def out(repo: Path, *args: str, extra_env: dict[str, str] | None = None) -> str:
    """The stripped standard output of `git args` in `repo`."""
    return run(repo, *args, extra_env=extra_env).stdout.decode(errors="replace").strip()


# ------------------------------------------------------------ a peer's repository, as data

def _read_small(path: Path) -> str | None:
    """A regular file's text; None when absent or anything else (a FIFO would block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_REF_FILE:
            return None
        return os.read(fd, _MAX_REF_FILE).decode(errors="replace")
    finally:
        os.close(fd)


def read_head(repo: Path) -> str:
    """The commit a repository's HEAD names, read from its files without running git.

    :raises NotFound: no HEAD, or one that names no commit id.
    """
    gitdir = repo / ".git"
    target = (_read_small(gitdir / "HEAD") or "").strip()
    for _ in range(5):  # a symbolic ref may name another one, but not forever
        if _HEX.fullmatch(target):
            return target
        name = target.removeprefix("ref: ").strip()
        if not _REF.fullmatch(name) or ".." in name:
            break
        loose = _read_small(gitdir / name)
        if loose is not None:
            target = loose.strip()
            continue
        packed = _read_small(gitdir / "packed-refs") or ""
        target = next((line.split()[0] for line in packed.splitlines()
                       if line.split()[1:] == [name]), "")
    raise NotFound(f"{repo} has no readable HEAD commit")


def _objects(source: Path) -> str:
    objects = (source / ".git" / "objects").absolute()
    if any(c in str(objects) for c in ':"\n'):  # the list separator and its quoting
        raise Invalid(f"cannot read objects from {objects}: ':' or quotes in the path")
    return str(objects)


def borrowing(source: Path) -> dict[str, str]:
    """The environment entry that lets a git in the caller's repository read `source`'s
    objects (as data: no git process enters `source`)."""
    return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": _objects(source)}


def _check_id(commit: str) -> None:
    if not _HEX.fullmatch(commit):
        raise Invalid(f"{commit!r} is not a full commit id")


def import_commit(into: Path, source: Path, commit: str) -> None:
    """Copy `commit` and what it needs from `source`'s objects into the repository `into`.

    git runs only in `into`; `source` is an object store it reads (see the module doc).
    :raises NotFound: `source` does not have the commit.
    """
    _check_id(commit)
    borrow = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": _objects(source)}
    if run(into, "cat-file", "-e", f"{commit}^{{commit}}", extra_env=borrow,
           check=False).returncode != 0:
        raise NotFound(f"commit {commit[:12]} is not in {source}")
    wanted = run(into, "rev-list", "--objects", commit, "--not", "--all",
                 extra_env=borrow).stdout
    if wanted.strip():
        pack = run(into, "pack-objects", "-q", "--stdout", input=wanted,
                   extra_env=borrow).stdout
        # index-pack without the alternate: it hashes every object it stores itself.
        run(into, "index-pack", "--stdin", input=pack)
    if run(into, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        raise NotFound(f"{source} holds no valid commit {commit[:12]}")


def diff_names(reader: Path, old: tuple[Path, str], new: tuple[Path, str]) -> list[str]:
    """Files that differ between two commits of other repositories, computed by a git
    running in `reader` (the caller's own repository) that borrows their objects."""
    for _, commit in (old, new):
        _check_id(commit)
    borrow = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": ":".join(
        dict.fromkeys(_objects(repo) for repo, _ in (old, new)))}
    text = out(reader, "diff", "--name-only", "--no-ext-diff", "--no-textconv",
               old[1], new[1], "--", extra_env=borrow)
    return [line for line in text.splitlines() if line]
