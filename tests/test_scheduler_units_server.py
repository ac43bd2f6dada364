"""The server's one scheduler and its wake units on a booted server, with real users
(issue 33; docs/architecture.md §7): systemd/experience-scheduler.service, the oneshot
systemd/citizen-wake@.service it starts, and the polkit rule that lets its user start and
stop those units - and nothing else, and nobody else.

The plumbing only: the scheduler's Python is not what runs here. A drop-in replaces its
ExecStart with a shell that does what the scheduler does to start a wake (write the
request in its run directory, `systemctl start --no-block citizen-wake@opus`), inside the
scheduler's real unit - its user, groups, sandbox and directories. Each refusal below is
polkit's: with the rule widened to any unit, any verb, any caller, or to the scheduler's
user alone, one of them is allowed (the docstrings say which).
Boots its own container (tests/nspawn.py); root and systemd-nspawn needed, skipped with
the reason elsewhere.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.nspawn import PIP_ENV, SETUP, Container, set_up_server, unavailable, until

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

SCHEDULER = "experience-scheduler"
WAKE = "citizen-wake@{}.service"
RUN_DIR = "/run/experience-scheduler"
STATE_DIR = "/var/lib/experience-scheduler"
STARTED = f"{RUN_DIR}/probe-started"  # what the stand-in scheduler's systemctl said
# The stand-in for `citizen run --all`: what the scheduler does to wake opus, then sleep.
DROP_IN = f"""[Service]
Type=simple
WatchdogSec=0
ExecStart=
ExecStart=/bin/sh -c 'mkdir -p {RUN_DIR}/wake && echo "{{}}" > {RUN_DIR}/wake/opus.json \\
  && systemctl --no-ask-password start --no-block {WAKE.format("opus")} \\
  > {STARTED}.tmp 2>&1; echo "exit $$?" >> {STARTED}.tmp; mv {STARTED}.tmp {STARTED}; \\
  exec sleep infinity'
"""
# What polkit says to a caller it does not allow (systemctl, with no agent to ask).
DENIED = ("Access denied", "Interactive authentication required")
# systemd's own exit statuses for a unit it could not set up (user, directory,
# credentials, namespaces, seccomp...): 200-245 (systemd.exec(5), "Process Exit Codes").
SETUP_FAILED = range(200, 246)


@pytest.fixture(scope="module")
def box() -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-sched") as (box, _):
        yield box


def systemctl_as(box: Container, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`systemctl` as `user` (outside any unit), never asking for a password."""
    return box.run("runuser", "-u", user, "--", "systemctl", "--no-ask-password", *args,
                   check=False)


def refused(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode != 0 and any(word in done.stderr for word in DENIED)


def show(box: Container, unit: str, prop: str) -> str:
    return box.run("systemctl", "show", "-p", prop, "--value", unit).stdout.strip()


def finished_since(box: Container, unit: str, invocation: str) -> bool:
    """`unit` ran after `invocation` (another invocation id) and has ended."""
    now = show(box, unit, "InvocationID")
    return now not in ("", invocation) and show(box, unit, "ActiveState") in ("inactive",
                                                                               "failed")


def test_setup_installs_the_units_and_the_rule_and_enables_nothing(box: Container) -> None:
    assert box.run("stat", "-c", "%a %U:%G",
                   "/etc/polkit-1/rules.d/50-experience-scheduler.rules").stdout.strip() \
        == "644 root:root"
    for unit in ("experience-scheduler.service", WAKE.format("opus")):
        assert show(box, unit, "LoadState") == "loaded", unit
    enabled = box.run("systemctl", "is-enabled", "experience-scheduler.service", check=False)
    assert enabled.stdout.strip() == "disabled"  # opt-in: DEPLOY.md, "A thousand citizens"
    assert show(box, "experience-scheduler.service", "ActiveState") == "inactive"
    # Its user reads the homes through its unit only: not in group citizens in /etc/group.
    assert box.run("id", "-nG", SCHEDULER).stdout.split() == [SCHEDULER]
    # A oneshot's run is its start: the wake's deadline is TimeoutStartSec (1260 s).
    assert show(box, WAKE.format("opus"), "TimeoutStartUSec") == "21min"
    again = box.run(SETUP, env=PIP_ENV, timeout=900).stdout
    assert "nothing changed" in again, again  # idempotent


@pytest.fixture(scope="module")
def scheduler(box: Container) -> Container:
    """The scheduler's unit running the stand-in, which has started opus's wake."""
    box.run("install", "-d", "-m", "0755", "/etc/systemd/system/experience-scheduler.service.d")
    box.run("sh", "-c", "cat > /etc/systemd/system/experience-scheduler.service.d/probe.conf",
            input=DROP_IN)
    box.run("systemctl", "daemon-reload")
    box.run("systemctl", "start", "experience-scheduler.service")
    until(lambda: box.run("test", "-f", STARTED, check=False).returncode == 0, timeout=60)
    return box


def test_the_scheduler_in_its_unit_starts_a_wake_that_runs_as_its_citizen(
        scheduler: Container) -> None:
    """(a) From inside its own sandbox (AF_UNIX only, no capability), over D-Bus to PID 1:
    polkit lets it, and systemd sets the wake up - opus's user, its ~/code, the
    scheduler's request as the unit's credential - as far as running the wrapper."""
    said = scheduler.run("cat", STARTED).stdout
    assert said.strip().endswith("exit 0") and not any(w in said for w in DENIED), said
    unit = WAKE.format("opus")
    until(lambda: finished_since(scheduler, unit, ""), timeout=180)
    status = int(show(scheduler, unit, "ExecMainStatus"))
    assert status not in SETUP_FAILED, (status, scheduler.run(
        "journalctl", "-u", unit, "--no-pager", "-n", "20", check=False).stdout)
    assert show(scheduler, unit, "User") == "opus"


def test_the_schedulers_user_may_start_and_stop_wake_units_and_nothing_else(
        scheduler: Container) -> None:
    """(a), (c): the same user, the same unit under other verbs, other units under the
    same verb (polkit is asked before systemd looks at the unit's state). A rule that
    allowed any unit lets `citizen@opus` through, one that allowed any citizen-wake@ name
    the escaped path, an unanchored pattern the name inside another's, any verb
    `restart`, any manage-units call of this user `citizen@opus` (and `systemd-run`)."""
    unit = WAKE.format("mira")
    before = show(scheduler, unit, "InvocationID")
    started = systemctl_as(scheduler, SCHEDULER, "start", "--no-block", unit)
    assert started.returncode == 0 and not refused(started), started.stderr
    until(lambda: finished_since(scheduler, unit, before), timeout=180)
    # Started with no request of the scheduler's, the wake never runs: systemd finds no
    # credential to load (243, EXIT_CREDENTIALS) - opus's, with one, ran (above).
    assert show(scheduler, unit, "ExecMainStatus") == "243"
    stopped = systemctl_as(scheduler, SCHEDULER, "stop", "--no-block", unit)
    assert stopped.returncode == 0 and not refused(stopped), stopped.stderr

    attempts = {
        "another unit of a citizen": ("start", "citizen@opus.service"),
        "the broker": ("start", "experience-broker.service"),
        "the broker stopped": ("stop", "experience-broker.service"),
        "an escaped path as the instance": ("start", "citizen-wake@../../x.service"),
        "a name no citizen has": ("start", "citizen-wake@Opus.service"),
        "a wake's name inside another's": ("start", "citizen-wake@x-citizen-wake@opus.service"),
        "restart": ("restart", WAKE.format("opus")),
        "kill": ("kill", WAKE.format("opus")),
        "set-property": ("set-property", WAKE.format("opus"), "MemoryMax=64G"),
    }
    for what, args in attempts.items():
        done = systemctl_as(scheduler, SCHEDULER, *args)
        assert refused(done), (what, done.returncode, done.stdout, done.stderr)
    transient = scheduler.run("runuser", "-u", SCHEDULER, "--", "systemd-run",
                              "--no-ask-password", "--unit=citizen-wake@aria", "/bin/true",
                              check=False)
    assert refused(transient), transient.stderr
    assert show(scheduler, "experience-broker.service", "ActiveState") == "active"


def test_a_citizen_may_neither_start_nor_stop_a_wake_unit(scheduler: Container) -> None:
    """(b) Another's wake, or its own: when a citizen wakes is the scheduler's to say."""
    for verb in ("start", "stop"):
        for unit in (WAKE.format("opus"), WAKE.format("mira")):
            done = systemctl_as(scheduler, "mira", verb, "--no-block", unit)
            assert refused(done), (verb, unit, done.returncode, done.stderr)


PROBE = f"""
import errno, os
for what, act in (
    ("plant a request", lambda: open("{RUN_DIR}/wake/opus.json", "w")),
    ("add a file", lambda: open("{RUN_DIR}/planted", "w")),
    ("list the run directory", lambda: os.listdir("{RUN_DIR}")),
    ("list the state directory", lambda: os.listdir("{STATE_DIR}")),
    ("add to the state directory", lambda: open("{STATE_DIR}/planted", "w")),
):
    try:
        act()
        print(what, "ok")
    except OSError as e:
        print(what, errno.errorcode[e.errno])
"""


def test_a_citizen_can_neither_plant_nor_read_the_schedulers_files(
        scheduler: Container) -> None:
    """(d) 0700 run directory, 0750 state directory, a group no citizen is in."""
    modes = scheduler.run("stat", "-c", "%n %a %U:%G", RUN_DIR, STATE_DIR).stdout.splitlines()
    owner = f"{SCHEDULER}:{SCHEDULER}"
    assert modes == [f"{RUN_DIR} 700 {owner}", f"{STATE_DIR} 750 {owner}"]
    said = scheduler.run("runuser", "-u", "mira", "--", "python3", "-c", PROBE).stdout
    lines = said.splitlines()
    assert len(lines) == 5 and all(line.endswith(" EACCES") for line in lines), said
