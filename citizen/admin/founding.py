"""Founding a civilization's tree: the commons and one home per citizen.

Dev mode (`citizen init`, no root): everything is owned by the current user. The
server install (scripts/setup_server.sh) creates users and groups and then uses the
same layout. Creation never overwrites: running it again fills only what is missing.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from citizen import config
from citizen.admin.modes import DOORBELL_MODE
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home.contexts import ContextStore
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from shared import gitsafe, layout
from shared.atomic import make_dirs

log = logging.getLogger(__name__)

ENV_TEMPLATE = """# Secrets of citizen {name}. Mode 0600: only {name} may read this file.
# Leave ANTHROPIC_API_KEY empty to use the embedded local model.
ANTHROPIC_API_KEY=
IMAP_SERVER=
SMTP_SERVER=
EMAIL_USER={email}
EMAIL_PASS=
"""


def _mkdir(path: Path, mode: int) -> bool:
    return bool(make_dirs(path, mode=mode))  # explicit mode: mkdir's is filtered by the umask


def init_shared() -> list[str]:
    """Create the commons; returns what was created."""
    made = []
    root = paths.shared_dir()
    # The modes are the layout's (as setup_server.sh): sticky where records are added,
    # not where files are rewritten in place by others (shared.layout says why).
    if _mkdir(root, layout.ROOT_MODE):
        made.append(str(root))
    for sub, mode in layout.DIRS:
        if _mkdir(root / sub, mode):
            made.append(str(root / sub))
    return made


def create_file(path: Path, text: str, mode: int) -> None:
    """Write a new file, never through a symlink: setup runs as root, and a citizen could
    have left a link at the name pointing anywhere (O_EXCL|O_NOFOLLOW refuse it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    os.fchmod(fd, mode)  # exactly `mode`: open's is filtered by whatever umask we run under
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def init_citizen(name: str, new: dict[str, Any] | None = None, *,
                 secrets_in_home: bool = True, identity: str = "") -> list[str]:
    """Create a citizen's home from its template; returns what was created.

    `new` gives email and focus for a citizen the templates do not know (onboarding).
    `secrets_in_home`: dev mode keeps the secrets in `~/.env`; a server keeps them (and
    the operator's rules) in /etc/experience, and the home's config holds only what the
    citizen may set for itself (config.CITIZEN_KEYS). `identity`: its first identity
    (default: its template's; citizen.broker.newcomer adds who asked for it).
    """
    tpl = config.templates()
    home = paths.home(name)
    made = []
    # 0750: the citizen owns its home; group `citizens` may look in (peer monitoring).
    if _mkdir(home.dir, 0o750):
        made.append(str(home.dir))
    for sub in (home.wake_logs, home.code):
        _mkdir(sub, 0o750)
    if not os.path.lexists(home.config):
        data = tpl.citizen_data(name) if name in tpl.citizen_names() else dict(new or {})
        # Validate before writing: a bad onboarding leaves no half-made config behind.
        tpl.build_citizen({**data, "name": name}, home.config)
        if not secrets_in_home:
            data = {k: v for k, v in data.items() if k in config.CITIZEN_KEYS}
        create_file(home.config, json.dumps({**data, "name": name}, indent=2) + "\n", 0o640)
        made.append(str(home.config))
    cfg = config.load_citizen(name)
    if secrets_in_home and not os.path.lexists(home.env):
        # O_EXCL + 0600 at creation: the secrets file is never readable by others, not even
        # for the moment between creating it and a chmod.
        create_file(home.env, ENV_TEMPLATE.format(name=name, email=cfg.email), 0o600)
        made.append(str(home.env))
    TaskQueue(home.tasks).init()
    Memory(home.memory).init()
    store = ContextStore(home.contexts, cfg.context_limits, estimate_tokens)
    before = {p.name for p in home.contexts.glob("*.json")} if home.contexts.exists() else set()
    store.init(identity or tpl.identity(name, cfg.focus))
    made += [str(home.contexts / n) for n in
             sorted({p.name for p in home.contexts.glob("*.json")} - before)]
    _mkdir(home.doorbell, DOORBELL_MODE)  # why: citizen/admin/modes.py
    return made


def init(names: list[str]) -> list[str]:
    """Create the commons and the homes of `names`."""
    made = init_shared()
    for name in names:
        made += init_citizen(name)
    return made


def init_code(names: list[str]) -> list[str]:
    """Dev mode: `shared/baseline` a git repository of this checkout and each citizen's
    `~/code` a clone of it, as on a server (so code evolution has repositories and
    daemons run their own code). The checkout enters as setup_server.sh's releases do:
    a commit on branch `release` (its tree, minus what .gitignore leaves out), merged
    into `main`. Never overwrites: an existing repository or clone is left as it is."""
    made = []
    baseline = paths.commons_layout().baseline
    if not _has_commit(baseline):  # also a repository a failed run left without one
        _git(baseline.parent, "init", "--quiet", "-b", "main", str(baseline))
        with tempfile.TemporaryDirectory() as tmp:  # a private index for the tree
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _git(baseline, f"--work-tree={paths.project_dir()}", "add", "-A", env=env)
            tree = _git(baseline, "write-tree", env=env)
        commit = _git(baseline, "commit-tree", tree, "-m", f"release from {paths.project_dir()}")
        _git(baseline, "merge", "--quiet", "--ff-only", commit)
        _git(baseline, "update-ref", "refs/heads/release", commit)
        made.append(f"{baseline} (a git repository of {paths.project_dir()})")
    for name in names:
        code = paths.home(name).code
        if _has_commit(code):
            continue
        if (code / ".git").exists():  # a clone a failed run left half-made
            shutil.rmtree(code)
        if code.exists() and not any(code.iterdir()):
            code.rmdir()
        _git(baseline.parent, "clone", "--quiet", str(baseline), str(code))
        for key, value in (("user.name", name), ("user.email", config.load_citizen(name).email)):
            _git(code, "config", key, value)
        made.append(f"{code} (clone of {baseline})")
    return made


def _has_commit(repo: Path) -> bool:
    return (repo / ".git").is_dir() and gitsafe.run(
        repo, "rev-parse", "-q", "--verify", "HEAD", check=False).returncode == 0


def _git(where: Path, *args: str, env: dict[str, str] | None = None) -> str:
    # gitsafe: setup never runs what a home or a repository's config names (DESIGN §11);
    # `where` is a repository unless it has none yet (init and clone run beside it).
    repo = where if (where / ".git").is_dir() else None
    try:
        done = gitsafe.run(repo, "-c", "user.name=Experience setup",
                           "-c", "user.email=experience@localhost", *args, cwd=where,
                           extra_env=env)
    except gitsafe.GitFailed as exc:
        raise CitizenError(str(exc)) from exc
    return done.stdout.decode().strip()
