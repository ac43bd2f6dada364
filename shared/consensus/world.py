"""The Thought World repository (`shared/world/`): where approved proposals act.

An approved proposal's actions run here, mechanically - exactly the actions that were
voted on, nothing a model says later - and are committed with git in one commit naming
the proposal, so any outcome can be inspected and reverted. Paths are confined to the
repository.

The repository belongs to the broker's user and nobody else writes it (issue 28, breaks
3 and 4): the executor asks the broker (`citizen.broker.world`), which re-derives that
the step is owed, runs the actions here and commits; a `run` action runs through the
`runner` it gives (bubblewrap, an unprivileged user, no credentials, output capped and
redacted) - without one, a command is refused, never run as whoever called.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from shared import gitsafe
from shared.atomic import make_dirs
from shared.errors import Invalid
from shared.layout import Layout
from shared.locks import locked

FILE_MODE = 0o644  # the broker's user writes; every citizen reads (checks, reviews)
DIR_MODE = 0o2755  # likewise; setgid keeps group `citizens` as setup made the top
UMASK = 0o022  # what git makes here is readable by all, writable by the broker alone
RUN_TIMEOUT_S = 120
OUTPUT_CHARS = 4000
# (command, world directory) -> the command's output; raises ActionError when it fails.
Runner = Callable[[str, Path], str]


class ActionError(Invalid):
    """An action that cannot run (bad path, unknown tool, failing command)."""


def _who(citizen: str) -> dict[str, str]:
    return {"GIT_AUTHOR_NAME": citizen, "GIT_COMMITTER_NAME": citizen,
            "GIT_AUTHOR_EMAIL": f"{citizen}@localhost",
            "GIT_COMMITTER_EMAIL": f"{citizen}@localhost"}


class World:
    def __init__(self, shared_dir: Path, runner: Runner | None = None) -> None:
        self.dir = Layout(shared_dir).world
        self.lock_file = Layout(shared_dir).world_lock
        self.runner = runner

    def git(self, *args: str, citizen: str = "", check: bool = True) -> str:
        """git in the world repository (gitsafe: no hook, fsmonitor or filter runs)."""
        done = gitsafe.run(self.dir, *args, extra_env=_who(citizen) if citizen else None,
                           check=check, umask=UMASK)
        return done.stdout.decode(errors="replace").strip()

    def _commit_index(self, message: str, citizen: str, first: bool = False) -> str:
        """Commit the index with plumbing (write-tree, commit-tree, update-ref)."""
        tree = self.git("write-tree")
        parents = [] if first else ["-p", "HEAD"]
        sha = self.git("commit-tree", tree, *parents, "-m", message, citizen=citizen)
        self.git("update-ref", "-m", f"commit: {message.splitlines()[0][:80]}", "HEAD", sha,
                 citizen=citizen)
        return sha

    @property
    def lock(self) -> contextlib.AbstractContextManager[float]:
        """One executor at a time: actions and their commit must not interleave."""
        return locked(self.dir, lock_file=self.lock_file)

    def repo(self) -> Path:
        """The repository (the broker's), created on first use."""
        if not (self.dir / ".git").exists():
            make_dirs(self.dir, self.dir, DIR_MODE)
            gitsafe.run(None, "init", "--quiet", str(self.dir), cwd=self.dir, umask=UMASK)
            readme = self.dir / "README.md"
            readme.write_text("# Thought World\n\nChanged only by approved proposals.\n")
            os.chmod(readme, FILE_MODE)  # door: the broker's own world repository
            self.git("add", "README.md")
            self._commit_index("Thought World repository", "experience", first=True)
        return self.dir

    def path(self, rel: str) -> Path:
        """A path inside the repository.

        :raises ActionError: absolute, escaping, or inside `.git`.
        """
        if not rel or rel.startswith("/") or "\x00" in rel:
            raise ActionError(f"path '{rel}' must be relative to the world repository")
        full = (self.dir / rel).resolve()
        if not full.is_relative_to(self.dir.resolve()) or ".git" in full.parts:
            raise ActionError(f"path '{rel}' leaves the world repository")
        return full

    def run(self, actions: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Carry out actions in order; stop at the first that fails. Returns one result each."""
        results = []
        for i, action in enumerate(actions):
            try:
                out = self._one(action)
                results.append({"action": i, "tool": action.get("tool"), "ok": True,
                                "output": out[:OUTPUT_CHARS]})
            except (ActionError, OSError) as exc:
                results.append({"action": i, "tool": action.get("tool"), "ok": False,
                                "output": str(exc)[:OUTPUT_CHARS]})
                break
        return results

    def _one(self, action: Mapping[str, Any]) -> str:  # noqa: PLR0911
        tool = str(action.get("tool", ""))
        args = dict(action.get("args") or {})
        if tool in ("run", "run_tests"):
            return self._command(str(args.get("command", "")))
        target = self.path(str(args.get("path", "")))
        if tool == "read_file":
            return target.read_text(encoding="utf-8", errors="replace")
        if tool == "list_files":
            return "\n".join(sorted(str(p.relative_to(self.dir)) for p in target.rglob("*")
                                    if ".git" not in p.parts))
        if tool == "search":
            pattern = str(args.get("pattern", ""))
            return "\n".join(str(p.relative_to(self.dir)) for p in sorted(target.rglob("*"))
                             if p.is_file() and ".git" not in p.parts
                             and pattern in p.read_text(errors="replace"))
        if tool in ("write_file", "append_file"):
            make_dirs(target.parent, self.dir, DIR_MODE)
            content = str(args.get("content", ""))
            with target.open("a" if tool == "append_file" else "w", encoding="utf-8") as fh:
                fh.write(content)
            os.chmod(target, FILE_MODE)  # door: the broker's own world repository
            return f"wrote {len(content)} characters to {args['path']}"
        if tool == "edit_file":
            text = target.read_text(encoding="utf-8")
            old, new = str(args.get("old", "")), str(args.get("new", ""))
            if not old or old not in text:
                raise ActionError(f"edit_file: the text to replace is not in {args['path']}")
            target.write_text(text.replace(old, new, 1), encoding="utf-8")
            return f"edited {args['path']}"
        if tool == "delete_file":
            target.unlink()
            return f"deleted {args['path']}"
        raise ActionError(f"unknown action '{tool}'")

    def _command(self, command: str) -> str:
        if not command.strip():
            raise ActionError("run: no command given")
        if self.runner is None:  # never as whoever called: only the broker's sandbox
            raise ActionError("run: commands run only in the broker's sandbox (ask the "
                              "broker: citizen.broker.world)")
        return self.runner(command, self.dir)

    def commit(self, message: str, citizen: str) -> str | None:
        """Commit every change; None when nothing changed."""
        self.repo()
        self.git("add", "--all")
        if self.git("diff", "--cached", "--name-only", "--no-ext-diff") == "" \
                and self.git("rev-parse", "-q", "--verify", "HEAD", check=False):
            return None
        return self._commit_index(message, citizen)

    def revert(self, sha: str, citizen: str) -> str:
        """Undo one commit with a new commit.

        :raises ActionError: later commits changed the same lines (the revert is aborted,
            the repository left as it was; a human has to untangle it).
        """
        self.repo()
        patch = self.git("show", sha, "--format=", "--binary", "--no-ext-diff",
                         "--no-textconv") + "\n"
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".patch") as fh:
                fh.write(patch)
                fh.flush()
                self.git("apply", "-R", "--index", fh.name)
        except gitsafe.GitFailed as exc:
            with contextlib.suppress(gitsafe.GitFailed):
                self.git("reset", "--hard", "-q")
            raise ActionError(f"could not revert {sha[:12]}: later changes conflict "
                              f"({str(exc)[-300:]})") from exc
        return self._commit_index(f"Revert {sha[:12]}: its outcomes were not verified",
                                  citizen)

    def discard(self) -> None:
        """Throw away uncommitted changes (a failed execution leaves nothing behind)."""
        self.repo()
        self.git("reset", "--hard", "-q")
        self.git("clean", "-fdq")

    def check(self, actions: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Mechanical outcome checks: does each change's result exist as stated?"""
        checks = []
        for action in actions:
            tool = action.get("tool")
            args = dict(action.get("args") or {})
            rel = str(args.get("path", ""))
            if tool not in ("write_file", "append_file", "edit_file", "delete_file"):
                continue
            try:
                target = self.path(rel)
            except ActionError as exc:
                checks.append({"check": f"{tool} {rel}", "met": False, "evidence": str(exc)})
                continue
            if tool == "delete_file":
                checks.append({"check": f"{rel} is gone", "met": not target.exists(),
                               "evidence": "absent" if not target.exists() else "still there"})
                continue
            want = str(args.get("new" if tool == "edit_file" else "content", ""))
            text = target.read_text(errors="replace") if target.is_file() else None
            met = text is not None and want in text
            checks.append({"check": f"{rel} holds the stated text", "met": met,
                           "evidence": "missing" if text is None else text[:300]})
        return checks
