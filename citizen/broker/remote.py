"""The broker's side of the shared repositories' one remote (issue 46, item 4).

With a remote named in the operator's civilization.json (`citizen.admin.remote`), the
civilization's main lives there; each server's broker keeps its local repository (where
it merges, exactly as on a server of its own, and which its citizens read as data) and
`advance` wraps each step that moves its main:

1. `sync`: fetch the remote's main (no credential) and move the local main to it, so two
   servers' brokers build on each other;
2. the step, locally (`Evolution.merge`: the merge rules do not change);
3. `push` the new main, with this broker's credential;
4. the remote refuses a push that is not a fast-forward: another server's broker pushed
   between our fetch and our push. The local main goes back where it was (the step's
   record forgotten: `forget`), and the step is fetched onto and re-applied on top of the
   other's main - at most ATTEMPTS times, then `Raced`: nothing changed, ask again.

A remote that cannot be reached, or that refuses the credential, undoes the step the same
way (`Unreachable`, 503 naming the fix): a step is on the shared main or nowhere. Without a
remote, `advance` is the step alone - a server on its own behaves exactly as before.

Every git call is `shared.gitsafe`'s, plus http(s) for the remote (`_git_env`).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from citizen.admin.remote import PUSHER_RE, RemoteError, Settings, read_private, settings
from citizen.errors import ConfigError
from shared import gitsafe
from shared.errors import Invalid, NotAllowed, SharedError

log = logging.getLogger(__name__)
T = TypeVar("T")

ATTEMPTS = 3  # two servers racing for main; a third loss in a row is not a race any more
MAIN = "refs/heads/main"
TRACKING = "refs/remotes/shared/"  # the remote's branches, as last fetched
_PROXIES = ("http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
Forget = Callable[[list[str]], None]  # the commits a step made that the remote never took


class Unreachable(SharedError, ConnectionError):
    """The remote did not answer, or refused this broker's credential (names the fix)."""


class Raced(NotAllowed):
    """Other servers' brokers pushed first, ATTEMPTS times in a row; nothing changed."""


def configured() -> Settings | None:
    """This server's remote, or None: its repositories are its own."""
    try:
        return settings()
    except ConfigError as exc:
        raise Unreachable(str(exc)) from exc


def read_token(path: Path) -> tuple[str, str]:
    """This broker's push credential (`NAME:TOKEN`, 0600, its user's own file)."""
    try:
        text = read_private(path, "the broker's remote token").decode(errors="replace")
    except RemoteError as exc:
        raise Unreachable(str(exc)) from exc
    name, _, token = text.strip().partition(":")
    if not PUSHER_RE.fullmatch(name) or len(token) < 32 or not token.isascii() \
            or not token.replace("-", "").replace("_", "").isalnum():
        raise Unreachable(f"{path} holds no `NAME:TOKEN` line - install there the file "
                          "`citizen remote add-pusher` wrote on the remote")
    return name, token


def _quoted(pairs: list[tuple[str, str]]) -> str:
    """GIT_CONFIG_PARAMETERS' syntax: each 'key=value' single-quoted as the shell does."""
    return " ".join("'" + f"{k}={v}".replace("'", "'\\''") + "'" for k, v in pairs)


def _git_env(remote: Settings, *, push: bool) -> dict[str, str]:
    pairs = [("protocol.http.allow", "always"), ("protocol.https.allow", "always"),
             ("http.followRedirects", "false"),  # the credential goes to the remote named
             ("http.proxy", "")]
    if push:
        name, token = read_token(remote.token_file)
        # Via the git child's own environment: never argv (world-readable in /proc), a URL
        # (logged) or .git/config (a file); /proc/PID/environ is the broker's user's alone.
        pairs.append(("http.extraHeader", "Authorization: Basic "
                      + base64.b64encode(f"{name}:{token}".encode()).decode()))
    # No proxy from the broker's environment: it would see the credential.
    return {"GIT_CONFIG_PARAMETERS": _quoted(pairs), **dict.fromkeys(_PROXIES, "")}


def _rev(repo: Path, ref: str) -> str | None:
    done = gitsafe.run(repo, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False)
    return done.stdout.decode().strip() if done.returncode == 0 else None


def _contains(repo: Path, ancestor: str, descendant: str) -> bool:
    return gitsafe.run(repo, "merge-base", "--is-ancestor", ancestor, descendant,
                       check=False).returncode == 0


def fetch(repo: Path, name: str, remote: Settings) -> str | None:
    """The remote's main of repository `name`, fetched into `repo` (None: it has none yet).

    :raises Unreachable: the remote did not answer.
    """
    url = remote.repository(name)
    # umask 022: the objects land in a repository every citizen of this server reads.
    done = gitsafe.run(repo, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", url,
                       f"+refs/heads/*:{TRACKING}*", extra_env=_git_env(remote, push=False),
                       check=False, umask=0o022)
    if done.returncode != 0:
        raise Unreachable(f"cannot fetch {url}: {done.stderr.decode(errors='replace')[-300:]}"
                          " - is the remote up (systemctl status experience-remote there) and "
                          "reachable from this server?")
    return _rev(repo, f"{TRACKING}main")


def push(repo: Path, name: str, remote: Settings) -> bool:
    """Push `repo`'s main to the remote's `name`; False when refused as not a fast-forward
    (another server's broker pushed first).

    :raises Unreachable: no answer, or the credential refused (the message says which).
    """
    url = remote.repository(name)
    done = gitsafe.run(repo, "push", "--porcelain", "--no-verify", url, f"{MAIN}:{MAIN}",
                       extra_env=_git_env(remote, push=True), check=False)
    if done.returncode == 0:
        return True
    refused = [line for line in done.stdout.decode(errors="replace").splitlines()
               if line.startswith("!")]
    if any("non-fast-forward" in line or "fetch first" in line for line in refused):
        return False
    why = "; ".join(refused) or done.stderr.decode(errors="replace").strip()[-300:]
    raise Unreachable(f"the remote {url} did not take this server's main ({why}) - is it up, "
                      f"and does {remote.token_file} hold this broker's credential (`citizen "
                      "remote add-pusher` on the remote)?")


def _move(repo: Path, commit: str) -> None:
    """The local main (checked out) and its work tree to `commit`."""
    head = gitsafe.run(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.decode().strip()
    if head != MAIN:
        raise Invalid(f"{repo} has {head or 'a detached HEAD'} checked out, not main - "
                      "check out main there (as the broker's user) and ask again")
    # umask 022: what the broker writes into the repository every citizen reads, none writes.
    gitsafe.run(repo, "reset", "--quiet", "--hard", commit, umask=0o022)


def rewind(repo: Path, to: str | None, forget: Forget) -> None:
    """The local main back to `to`, forgetting what the steps since then recorded."""
    ours = _rev(repo, MAIN)
    if to is None or ours is None or ours == to:
        return
    dropped = gitsafe.out(repo, "rev-list", ours, "--not", to).split()
    forget(dropped)
    _move(repo, to)


def sync(repo: Path, name: str, remote: Settings, forget: Forget) -> str | None:
    """Fetch the remote's main and bring the local main to it; the commit a step builds on.

    Local commits the remote lacks stay when the remote's main is below them (a step whose
    push a stop interrupted: the next push carries it); when both moved, the remote's wins
    and ours are forgotten (`forget`), to be made again when asked.
    """
    theirs = fetch(repo, name, remote)
    ours = _rev(repo, MAIN)
    if theirs is None or theirs == ours:
        return ours
    if ours is not None and _contains(repo, theirs, ours):
        return ours
    if ours is not None and not _contains(repo, ours, theirs):
        log.warning("%s: this server's main %s and the remote's %s diverged; the remote's "
                    "wins", name, ours[:12], theirs[:12])
        rewind(repo, gitsafe.out(repo, "merge-base", ours, theirs), forget)
    _move(repo, theirs)
    return theirs


def _landed(repo: Path, name: str, remote: Settings) -> bool:
    """Whether the remote's main holds the local main after all."""
    ours = _rev(repo, MAIN)
    try:
        theirs = fetch(repo, name, remote)
    except Unreachable:
        return False
    return ours is not None and theirs is not None and _contains(repo, ours, theirs)


def advance(repo: Path, name: str, step: Callable[[], T], forget: Forget,
            remote: Settings | None = None) -> T:
    """Run `step` (it moves `repo`'s main) on the shared main and publish it (module doc).

    :raises Unreachable: no remote to fetch from or push to; nothing changed.
    :raises Raced: other servers' brokers pushed first ATTEMPTS times; nothing changed.
    """
    remote = remote or configured()
    if remote is None:
        return step()
    for attempt in range(1, ATTEMPTS + 1):
        base = sync(repo, name, remote, forget)
        result = step()
        try:
            if push(repo, name, remote):
                return result
        except Unreachable:
            if _landed(repo, name, remote):  # the answer was lost, not the push
                return result
            rewind(repo, base, forget)
            raise
        rewind(repo, base, forget)
        log.warning("%s: another server's broker pushed first (attempt %d of %d); fetching "
                    "its main and applying the step again on top", name, attempt, ATTEMPTS)
    raise Raced(f"the shared {name} moved under this step {ATTEMPTS} times in a row (other "
                "servers' brokers pushed first); nothing changed - ask again")
