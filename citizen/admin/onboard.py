"""Onboarding on a server: one Unix user per citizen, its home, its code, its unit.

`scripts/setup_server.sh` calls this for every citizen, and `citizen onboard NAME`
is the same function, so a citizen added later is made exactly like the first ones.
Every step is idempotent and reports only what it changed.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from citizen import config
from citizen.admin import founding, network, remote, schedstore
from citizen.admin.modes import DOORBELL_MODE, repair_modes
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home import quiesce
from shared import door
from shared.atomic import make_dirs

GROUP = "citizens"
BROKER_USER = "experience-broker"  # holds the model keys (citizen.broker); not a citizen
# The mailbox settings an older install kept apart in <name>.mail.env (broker_secrets).
MAIL_KEYS = ("IMAP_SERVER", "SMTP_SERVER", "EMAIL_USER", "EMAIL_PASS", "IMAP_TLS", "SMTP_TLS")


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
    baseline = paths.commons_layout().baseline
    # On several servers the shared baseline is the remote's (citizen.admin.remote).
    source = remote.baseline_source(baseline)
    if source == str(baseline) and not (baseline / ".git").exists():
        raise OnboardError(f"no baseline repository at {baseline} - run "
                           "scripts/setup_server.sh first")
    if home.code.exists() and not any(home.code.iterdir()):
        home.code.rmdir()
    _run("runuser", "-u", name, "--", "git", "clone", "--quiet", source, str(home.code))
    # No safe.directory for it: peers read its objects as data, never open it with git
    # (shared.gitsafe) - declaring it safe would let its config run as them.
    # Its own commits (code evolution) and merges of new baselines are signed by it.
    email = config.load_citizen(name).email
    for key, value in (("user.name", name), ("user.email", email)):
        _run("runuser", "-u", name, "--", "git", "-C", str(home.code), "config", key, value)
    return [f"{home.code} (clone of {source})"]


def _no_symlink(path: Path) -> None:
    if path.is_symlink():
        raise OnboardError(f"{path} is a symbolic link; onboarding runs as root and follows "
                           "none - remove it (a citizen may have planted it) and run again")


def _migrated_env(name: str, uid: int) -> str:
    """The secrets an older install kept in `~/.env`, read without trusting the file: no
    symlink (O_NOFOLLOW), a regular file the citizen owns with one link (not a hard
    link to a peer's secrets). "" when there is none or it is not trustworthy."""
    path = paths.citizen_env_file(name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:
            raise OnboardError(f"{path} is not a plain file of {name}'s own - move the "
                               f"secrets into {paths.operator_secrets_file(name)} by hand")
        return fh.read()


def _say_what_no_longer_counts(name: str, rules: Path) -> None:
    """An older install kept the operator's settings in the home's config.json, which
    the citizen can write: they are not copied (the citizen may have changed them), but
    the operator is told which to carry over by hand."""
    own = paths.citizen_config_file(name)
    try:  # the citizen's file: through the door (no link, no FIFO, capped, not too deep)
        data = door.loads(door.read_capped(own, 1 << 20))
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    tpl = config.templates()
    base = tpl.citizen_data(name) if name in tpl.citizen_names() else {}
    moved = sorted(k for k, v in data.items()
                   if k not in (*config.CITIZEN_KEYS, "name") and base.get(k) != v)
    if moved:
        print(f"note: {own} sets {', '.join(moved)}; on a server only {rules} governs "
              "these - copy what you set there yourself (they were not copied: the citizen "
              "could have changed them)", file=sys.stderr)


def operator_files(name: str, email: str, focus: str, uid: int) -> list[str]:
    """/etc/experience/<name>.json (the operator's rules for it, root 0644: the citizen
    reads them, only root writes) and <name>.env (its secrets, root 0600: its unit hands
    them to the daemon as a credential). Secrets found in an older `~/.env` move there."""
    made = []
    tpl = config.templates()
    known = name in tpl.citizen_names()
    address = email or (tpl.citizen_data(name)["email"] if known else f"{name}@experience.local")
    folder = paths.operator_dir()
    _no_symlink(folder)
    if not folder.is_dir():
        folder.mkdir(parents=True)
        made.append(str(folder))
    if folder.stat().st_mode & 0o777 != 0o755:
        folder.chmod(0o755)  # door: /etc/experience, root's; citizens read their rules
    rules = paths.operator_rules_file(name)
    _no_symlink(rules)
    if not rules.exists():
        _say_what_no_longer_counts(name, rules)
        body: dict[str, str] = {"email": address}
        if not known:
            body["focus"] = focus or "General"
        founding.create_file(rules, json.dumps(body, indent=2) + "\n", 0o644)
        made.append(str(rules))
    secrets = paths.operator_secrets_file(name)
    _no_symlink(secrets)
    if not secrets.exists():
        text = _migrated_env(name, uid)
        founding.create_file(
            secrets, text or founding.ENV_TEMPLATE.format(name=name, email=address), 0o600)
        made.append(str(secrets) + (" (moved from ~/.env)" if text else ""))
    made += broker_secrets(name, secrets)
    old = paths.citizen_env_file(name)
    if old.is_symlink() or old.exists():
        old.unlink()  # unlink never follows a link; the secrets live in /etc now
        made.append(f"{old} removed (secrets live in {secrets})")
    return made


def broker_secrets(name: str, secrets: Path) -> list[str]:
    """Make the citizen's secrets the broker's alone (0600): the model key and the mailbox,
    which the broker logs in to on the citizen's behalf - no process of the citizen's
    reads either. An install that split the mailbox into `<name>.mail.env` (its daemon
    logged in itself) has those lines merged back into `<name>.env` and the file removed."""
    made: list[str] = []
    legacy = paths.operator_mail_file(name)
    _no_symlink(legacy)
    if legacy.exists():
        text = secrets.read_text(encoding="utf-8")  # door: /etc/experience/<c>.env, root's
        have = {k for k, v in config.parse_env(secrets).items() if v}
        # door: the operator's legacy mail file in /etc/experience, root's
        moving = [ln + "\n" for ln in legacy.read_text(encoding="utf-8").splitlines()
                  if _key(ln) in MAIL_KEYS and _key(ln) not in have]
        if moving:  # appended: a later line wins over an empty one left above
            _rewrite(secrets, text + ("\n" if text and not text.endswith("\n") else "")
                     + "".join(moving))
        legacy.unlink()
        made.append(f"{legacy} merged back into {secrets} and removed (the broker reads "
                    "the mailbox now; the citizen's unit gets no credential)")
    try:
        broker = pwd.getpwnam(BROKER_USER)
    except KeyError:
        return made  # no broker user (an install before the broker): setup makes it first
    st = os.lstat(secrets)
    if (st.st_uid, st.st_mode & 0o777) != (broker.pw_uid, 0o600):
        os.chown(secrets, broker.pw_uid, broker.pw_gid, follow_symlinks=False)
        os.chmod(secrets, 0o600)  # door: /etc/experience, root's; the broker's alone
        made.append(f"{secrets} now the broker's")
    return made


def _key(line: str) -> str:
    return line.split("=", 1)[0].strip().removeprefix("export ") if "=" in line else ""


def _rewrite(path: Path, text: str) -> None:
    """Replace a root-owned file's text, keeping its owner and mode (atomic)."""
    st = os.lstat(path)
    tmp = path.with_name(f".{path.name}.new")
    tmp.unlink(missing_ok=True)
    founding.create_file(tmp, text, st.st_mode & 0o777)
    os.chown(tmp, st.st_uid, st.st_gid, follow_symlinks=False)
    tmp.replace(path)


def onboard(name: str, email: str = "", focus: str = "", enable: bool = True, *,
            strengths: tuple[str, ...] = (), identity: str = "") -> list[str]:
    """Create citizen `name` on this server; returns what changed (empty: nothing to do).
    `strengths`, `identity`: a newcomer a citizen asked for (citizen.broker.newcomer)."""
    if os.geteuid() != 0:
        raise OnboardError("onboarding creates a Unix user: run it as root (sudo citizen "
                           f"onboard {name})")
    paths.check_name(name)
    if shutil.which("useradd") is None:
        raise OnboardError("useradd is missing - install the passwd package")
    changed = ensure_user(name)
    user = pwd.getpwnam(name)
    gid = grp.getgrnam(GROUP).gr_gid
    _no_symlink(paths.citizen_home(name))
    changed += operator_files(name, email, focus, user.pw_uid)
    new: dict[str, object] = {"email": email or f"{name}@experience.local",
                              "focus": focus or "General",
                              **({"strengths": list(strengths)} if strengths else {})}
    doorbell = paths.home(name).doorbell
    if not paths.citizen_home(name).exists():
        made = founding.init_citizen(name, new, secrets_in_home=False,
                                         identity=identity)
        # The citizen owns everything in its home; group `citizens` can read (0750 dirs).
        _chown_tree(paths.citizen_home(name), user.pw_uid, gid)
        changed += made
    # An existing home is the citizen's: root writes nothing there (a link it planted at
    # a missing file's name would be followed), only its commons doorbell may be missing.
    elif not doorbell.exists() and not doorbell.is_symlink():
        make_dirs(doorbell, mode=DOORBELL_MODE)
        changed.append(str(doorbell))
    changed += clone_code(name)
    changed += quiesce.prepare(name, user.pw_uid, gid)  # its daemon's lock, for backups
    _no_symlink(doorbell)
    changed += repair_modes(name, user.pw_uid, gid)
    if enable and shutil.which("systemctl"):
        dropped = network.apply(name)  # the operator's network rule, in the unit itself
        if dropped:
            _run("systemctl", "daemon-reload")
            changed += dropped
        unit = f"citizen@{name}.service"
        enabled = subprocess.run(["systemctl", "is-enabled", "--quiet", unit], check=False)
        if enabled.returncode != 0:
            _run("systemctl", "enable", "--quiet", unit)
            changed.append(f"{unit} enabled")
        if changed and subprocess.run(["systemctl", "is-active", "--quiet",
                                       schedstore.UNIT], check=False).returncode == 0:
            # The scheduler lists the citizens when it starts: a restart schedules this
            # one (running wakes are their own units; its counters are on disk).
            _run("systemctl", "try-restart", schedstore.UNIT)
            changed.append(f"{schedstore.UNIT} restarted: it schedules {name}")
    return changed
