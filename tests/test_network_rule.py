"""The network is the operator's to grant: a citizen's unit gets a private network
namespace unless its rules grant `can_use_network` (issue 28, item 3). The booted test
(tests/test_hostile_server.py) shows the kernel keeping such a daemon off the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citizen.admin import network


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(network.UNIT_DIR_ENV, str(tmp_path / "units"))
    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(tmp_path / "etc"))
    (tmp_path / "etc").mkdir()
    return tmp_path


def rules(dirs: Path, **entry: object) -> None:
    (dirs / "etc" / "opus.json").write_text(json.dumps(entry))


def test_without_the_permission_the_unit_has_no_network(civ: Path, dirs: Path) -> None:
    assert network.apply("opus")
    assert "PrivateNetwork=yes" in network.drop_in("opus").read_text()
    assert network.apply("opus") == []  # a second run changes nothing


def test_the_wake_unit_is_held_to_the_same_rule(civ: Path, dirs: Path) -> None:
    """Under the server's scheduler the citizen runs in citizen-wake@NAME, not its
    daemon's unit: without its own drop-in every wake would see the network."""
    network.apply("opus")
    assert "PrivateNetwork=yes" in network.drop_in("opus", "citizen-wake").read_text()
    rules(dirs, permissions={"can_use_network": True})
    network.apply("opus")
    assert not network.drop_in("opus", "citizen-wake").exists()


def test_the_citizens_own_config_grants_nothing(civ: Path, dirs: Path) -> None:
    own = civ / "opus" / "config.json"
    data = json.loads(own.read_text())
    data["permissions"] = {**data.get("permissions", {}), "can_use_network": True}
    own.write_text(json.dumps(data))
    network.apply("opus")
    assert network.drop_in("opus").is_file()  # still closed: only the operator grants it


def test_the_operators_grant_opens_it(civ: Path, dirs: Path) -> None:
    network.apply("opus")
    rules(dirs, permissions={"can_use_network": True})
    assert "removed" in network.apply("opus")[0]
    assert not network.drop_in("opus").exists()


def test_a_local_model_server_keeps_it_open(civ: Path, dirs: Path) -> None:
    rules(dirs, llm={"provider": "local", "local_url": "http://127.0.0.1:8080/v1"})
    assert network.apply("opus") == [] and not network.drop_in("opus").exists()
