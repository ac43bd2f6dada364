"""systemd/citizen-web.service holds what the dashboard's unit promises (issue 32): its own
unprivileged user, read-only everything, loopback only, no credential - and setup installs
it with the token the pages ask for. The booted check (the user reads a wake log and not a
citizen's secrets) is tests/server_install/test_1_install.py's."""

from __future__ import annotations

import re

from citizen.config import paths

UNIT = paths.project_dir() / "systemd" / "citizen-web.service"
SETUP = (paths.project_dir() / "scripts" / "setup_server.sh").read_text()
DEPLOY = (paths.project_dir() / "DEPLOY.md").read_text()


def directives(text: str) -> dict[str, list[str]]:
    """Every `Key=value` of a unit (a key may repeat: each value kept, in order)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_it_runs_as_its_own_user_reading_the_homes_as_a_peer() -> None:
    unit = directives(UNIT.read_text())
    assert unit["User"] == ["experience-web"] and unit["Group"] == ["experience-web"]
    assert unit["SupplementaryGroups"] == ["citizens"]  # the homes are 0750 group citizens
    assert unit["ExecStart"] == [
        "/opt/experience/venv/bin/python -m citizen web --listen 127.0.0.1:8765"]
    assert unit["Environment"][:2] == ["CIV_ROOT=/home", "PYTHONPATH=/opt/experience/release"]


def test_it_is_hardened_and_writes_nothing() -> None:
    unit = directives(UNIT.read_text())
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict",
                       "ProtectHome": "read-only", "PrivateTmp": "yes",
                       "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
                       "IPAddressDeny": "any", "IPAddressAllow": "localhost",
                       "CapabilityBoundingSet": "", "AmbientCapabilities": "",
                       "RestrictNamespaces": "yes", "UMask": "0077"}.items():
        assert unit.get(key) == [value], key
    # No writable path at all (the group citizens may write the commons: not from here),
    # and no credential handed in.
    for key in ("ReadWritePaths", "StateDirectory", "LoadCredential", "EnvironmentFile"):
        assert key not in unit, key


def test_each_permission_decision_says_why() -> None:
    lines = UNIT.read_text().splitlines()
    for key in ("User", "SupplementaryGroups", "UMask", "ProtectHome", "PrivateTmp",
                "NoNewPrivileges", "RestrictAddressFamilies", "IPAddressDeny",
                "CapabilityBoundingSet", "ExecStart"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}="))
        block = lines[:at]
        while block and not block[-1].startswith("#") and block[-1].strip():
            block.pop()  # directives of the same decision (User= then Group=)
        assert block and block[-1].startswith("#"), f"{key}= has no comment saying why"


def test_setup_installs_it_with_the_token_and_leaves_it_to_the_operator() -> None:
    units = re.search(r"^for unit in (.*?); do", SETUP, re.S | re.M)
    assert units is not None and "citizen-web.service" in units.group(1).split()
    assert 'system_user experience-web "Experience dashboard"' in SETUP
    assert "useradd --system --user-group --home-dir /nonexistent --no-create-home \\\n" \
        '            --shell /usr/sbin/nologin --comment "$2" "$1"' in SETUP  # system_user's
    assert "token=/etc/experience/web.token" in SETUP
    assert 'chown root:experience-web "$tmp"\n    chmod 0640 "$tmp"' in SETUP
    assert 'mv -n "$tmp" "$token"' in SETUP  # made once, never overwritten
    # Not enabled by setup: the operator's `systemctl enable --now citizen-web`.
    assert not re.search(r"^\s*systemctl enable[^\n]*citizen-web", SETUP, re.M)
    assert "systemctl enable --now citizen-web" in DEPLOY


def test_setup_installs_and_enables_roots_approval_helper_with_its_socket() -> None:
    units = re.search(r"^for unit in (.*?); do", SETUP, re.S | re.M)
    assert units is not None
    listed = units.group(1).replace("\\\n", " ").split()
    assert {"experience-approve.socket", "experience-approve@.service"} <= set(listed)
    # The socket is enabled and started (the service is instantiated per connection);
    # the web user's group exists by then, since SocketGroup= names it.
    assert "systemctl enable --quiet --now experience-approve.socket" in SETUP
    assert SETUP.index('system_user experience-web "Experience dashboard"') \
        < SETUP.index("enable --quiet --now experience-approve.socket")
    socket = directives((paths.project_dir() / "systemd" / "experience-approve.socket")
                        .read_text())
    assert socket["SocketGroup"] == ["experience-web"] and socket["SocketMode"] == ["0660"]
    assert socket["Accept"] == ["yes"]
    assert socket["WantedBy"] == ["sockets.target"]
