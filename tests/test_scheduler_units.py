"""The scheduler's units hold what docs/architecture.md §7 promises (issue 33): a wake unit
with exactly the daemon's sandbox, a scheduler with no network and no writable path but
its own, a polkit rule naming only wake units of names a citizen can have - and setup
installs them and turns none on. What they do on a booted server, with real users, is
tests/test_scheduler_units_server.py's."""

from __future__ import annotations

import re

from citizen.config import paths
from tests.test_web_unit import directives

SYSTEMD = paths.project_dir() / "systemd"
DAEMON = (SYSTEMD / "citizen@.service").read_text()
WAKE = (SYSTEMD / "citizen-wake@.service").read_text()
SCHEDULER = (SYSTEMD / "experience-scheduler.service").read_text()
RULE = (SYSTEMD / "50-experience-scheduler.rules").read_text()
SETUP = (paths.project_dir() / "scripts" / "setup_server.sh").read_text()


def hardening(unit: str) -> list[str]:
    """The directives of a unit's hardening block, in order."""
    block = unit[unit.index("\n# Hardening"):unit.index("\n[Install]") if "[Install]" in unit
                 else len(unit)]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_a_wake_runs_in_exactly_the_daemons_sandbox() -> None:
    assert hardening(WAKE) == hardening(DAEMON)
    wake, daemon = directives(WAKE), directives(DAEMON)
    for key in ("User", "Group", "UMask", "WorkingDirectory"):
        assert wake[key] == daemon[key], key
    # The same environment but the path: the wrapper is the root-owned release.
    assert wake["Environment"] == [
        "PYTHONPATH=/opt/experience/release" if value.startswith("PYTHONPATH=") else value
        for value in daemon["Environment"]]


def test_a_wake_is_one_run_started_by_the_scheduler_alone() -> None:
    wake = directives(WAKE)
    assert wake["Type"] == ["oneshot"]
    assert wake["LoadCredential"] == ["request:/run/experience-scheduler/wake/%i.json"]
    assert wake["ExecStart"] == [
        "/opt/experience/venv/bin/python -m citizen run %i --request %d/request"]
    # A oneshot's run is its start: TimeoutStartSec bounds it (RuntimeMaxSec would not).
    assert wake["TimeoutStartSec"] == ["1260"] and "RuntimeMaxSec" not in wake
    for key in ("Restart", "WatchdogSec", "ExecStartPre", "NotifyAccess", "WantedBy",
                "PartOf"):
        assert key not in wake, key


def test_the_scheduler_reaches_nothing_but_its_own_files_and_pid_1() -> None:
    unit = directives(SCHEDULER)
    for key, value in {"User": "experience-scheduler", "Group": "experience-scheduler",
                       "SupplementaryGroups": "citizens", "UMask": "0077",
                       "RestrictAddressFamilies": "AF_UNIX", "ProtectHome": "read-only",
                       "ProtectSystem": "strict", "CapabilityBoundingSet": "",
                       "NoNewPrivileges": "yes", "StateDirectoryMode": "0750",
                       "RuntimeDirectoryMode": "0700"}.items():
        assert unit.get(key) == [value], key
    for key in ("ReadWritePaths", "LoadCredential", "EnvironmentFile"):
        assert key not in unit, key
    lines = SCHEDULER.splitlines()
    for key in ("User", "SupplementaryGroups", "UMask", "StateDirectory", "RuntimeDirectory",
                "RestrictAddressFamilies", "RestrictNamespaces"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}="))
        block = lines[:at]
        while block and not block[-1].startswith("#") and block[-1].strip():
            block.pop()
        assert block and block[-1].startswith("#"), f"{key}= has no comment saying why"


def test_the_rule_names_only_wake_units_of_names_a_citizen_can_have() -> None:
    found = re.search(r"var wake = /\^citizen-wake@(.*)\\\.service\$/;", RULE)
    assert found is not None
    assert f"^{found.group(1)}$" == paths.NAME_RE.pattern  # onboarding's names, no other
    assert 'subject.user !== "experience-scheduler"' in RULE
    assert '(verb === "start" || verb === "stop")' in RULE


def test_setup_installs_them_and_turns_none_on() -> None:
    units = re.search(r"^for unit in (.*?); do", SETUP, re.S | re.M)
    assert units is not None
    listed = units.group(1).replace("\\\n", " ").split()
    assert {"citizen-wake@.service", "experience-scheduler.service"} <= set(listed)
    assert "rules=/etc/polkit-1/rules.d/50-experience-scheduler.rules" in SETUP
    assert 'system_user experience-scheduler "Experience scheduler"' in SETUP
    assert "not_in_citizens experience-scheduler" in SETUP
    assert not re.search(r"systemctl (enable|start)[^\n]*(experience-scheduler|citizen-wake)",
                         SETUP)
