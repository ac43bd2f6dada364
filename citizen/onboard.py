"""Onboarding on a server: one Unix user per citizen, its home, its code, its unit.

`scripts/setup_server.sh` calls this for every citizen, and `citizen onboard NAME`
is the same function, so a citizen added later is made exactly like the first ones.
Every step is idempotent and reports only what it changed.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from citizen import civilization, config, paths
from citizen.errors import CitizenError

GROUP = "citizens"


class OnboardError(CitizenError, RuntimeError):
    """Onboarding could not proceed."""


def _run(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OnboardError(f"`{' '.join(args)}` failed: {result.stderr.strip() or result.stdout}")


def ensure_user(name: str) -> list[str]:
    """The citizen's Unix user, in group `citizens`; refuses to adopt a non-citizen user."""
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        _run("useradd", "--home-dir", str(paths.citizen_home(name)), "--no-create-home",
             "--gid", GROUP, "--shell", "/usr/sbin/nologin", "--comment",
             f"Experience citizen {name}", name)
        return [f"user {name}"]
    if user.pw_gid != grp.getgrnam(GROUP).gr_gid:
        raise OnboardError(f"a user named {name} already exists and is not a citizen (its "
                           f"primary group is not {GROUP}) - choose another name")
    return []


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for base, dirs, files in os.walk(root):
        for entry in (Path(base), *(Path(base) / n for n in (*dirs, *files))):
            os.chown(entry, uid, gid, follow_symlinks=False)


def clone_code(name: str) -> list[str]:
    """`~/code`: a git clone of the baseline, made by the citizen itself (so it owns it)."""
    home = paths.home(name)
    if (home.code / ".git").exists():
        return []
    baseline = paths.shared_dir() / "baseline"
    if not (baseline / ".git").exists():
        raise OnboardError(f"no baseline repository at {baseline} - run "
                           "scripts/setup_server.sh first")
    if home.code.exists() and not any(home.code.iterdir()):
        home.code.rmdir()
    _run("runuser", "-u", name, "--", "git", "clone", "--quiet", str(baseline), str(home.code))
    # Peers fetch changes from this repository (code evolution): git must accept that
    # it belongs to another user.
    for safe in (home.code, home.code / ".git"):
        listed = subprocess.run(["git", "config", "--system", "--get-all", "safe.directory"],
                                capture_output=True, text=True, check=False).stdout.split()
        if str(safe) not in listed:
            _run("git", "config", "--system", "--add", "safe.directory", str(safe))
    # Its own commits (code evolution) and merges of new baselines are signed by it.
    email = config.load_citizen(name).email
    for key, value in (("user.name", name), ("user.email", email)):
        _run("runuser", "-u", name, "--", "git", "-C", str(home.code), "config", key, value)
    return [f"{home.code} (clone of {baseline})"]


def onboard(name: str, email: str = "", focus: str = "", enable: bool = True) -> list[str]:
    """Create citizen `name` on this server; returns what changed (empty: nothing to do)."""
    if os.geteuid() != 0:
        raise OnboardError("onboarding creates a Unix user: run it as root (sudo citizen "
                           f"onboard {name})")
    paths.check_name(name)
    if shutil.which("useradd") is None:
        raise OnboardError("useradd is missing - install the passwd package")
    changed = ensure_user(name)
    new = {"email": email or f"{name}@experience.local", "focus": focus or "General"}
    made = civilization.init_citizen(name, new)
    user = pwd.getpwnam(name)
    gid = grp.getgrnam(GROUP).gr_gid
    if made:
        # The citizen owns everything in its home; group `citizens` can read (0750 dirs).
        _chown_tree(paths.citizen_home(name), user.pw_uid, gid)
        changed += made
    changed += clone_code(name)
    doorbell = paths.home(name).doorbell
    if doorbell.stat().st_uid != user.pw_uid:
        os.chown(doorbell, user.pw_uid, gid)  # its daemon removes the events peers ring
        changed.append(str(doorbell))
    if enable and shutil.which("systemctl"):
        unit = f"citizen@{name}.service"
        enabled = subprocess.run(["systemctl", "is-enabled", "--quiet", unit], check=False)
        if enabled.returncode != 0:
            _run("systemctl", "enable", "--quiet", unit)
            changed.append(f"{unit} enabled")
    return changed
