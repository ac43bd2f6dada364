"""Each citizen's disk budget: what is measured, the verdict, where it shows, what stops.

Dev mode, real files under tmp_path and a real `du`. The unit is stopped through
`systemctl`, which here is a recording stand-in on PATH (the booted server runs the
real one: tests/test_hostile_onboard_server.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from citizen import config
from citizen.admin import disk
from citizen.cli import cli

pytestmark = pytest.mark.usefixtures("civ")
MIB = 1 << 20


def fill(path: Path, mib: float) -> None:
    """A file that really uses `mib` MiB of disk (not sparse)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(int(mib * MIB)))


def budget(civ: Path, name: str, mb: int, *, where: Path | None = None) -> None:
    path = where or civ / name / "config.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["budget"] = {**data.get("budget", {}), "max_home_mb": mb}
    path.write_text(json.dumps(data))


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_links_sparse_files_and_hard_links_count_what_they_hold(
        civ: Path, tmp_path: Path) -> None:
    home = civ / "opus"
    base = disk.measure(home)
    assert base is not None
    fill(home / "work" / "big.bin", 3)
    outside = tmp_path / "outside.bin"
    fill(outside, 8)
    (home / "work" / "link").symlink_to(outside)  # a link out counts as a link
    (home / "work" / "root").symlink_to("/")
    os.link(home / "work" / "big.bin", home / "work" / "again.bin")  # the same blocks
    with (home / "work" / "sparse.bin").open("wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB long, no blocks
    used = disk.measure(home)
    assert used is not None
    assert 3 * MIB <= used - base < 3.5 * MIB


def test_the_verdict_is_ok_near_over_or_unmeasured() -> None:
    assert disk.judge(10 * MIB, 100) == "ok"
    assert disk.judge(95 * MIB, 100) == "near"
    assert disk.judge(100 * MIB + 1, 100) == "over"
    assert disk.judge(None, 100) == "unmeasured"  # too slow to walk counts as over
    assert "unmeasured" in disk.ENFORCED and "over" in disk.ENFORCED


def test_a_home_past_its_budget_is_reported_and_shown_in_status(civ: Path) -> None:
    assert config.load_citizen("opus").budget.max_home_mb == 2048  # the default
    budget(civ, "opus", 2)
    fill(civ / "opus" / "work" / "big.bin", 3)
    rows = {r["citizen"]: r for r in json.loads(invoke("disk", "check", "--json"))}
    assert rows["opus"]["state"] == "over" and rows["opus"]["budget_mb"] == 2
    assert rows["mira"]["state"] == "ok" and rows["mira"]["budget_mb"] == 2048
    assert "OVER" in invoke("disk", "check", "opus")
    # The table row, then a line under the table for what needs the operator.
    lines = "\n".join(ln for ln in invoke("status").splitlines() if ln.startswith("opus"))
    assert "opus: DISK BUDGET" in lines and "of 2 MB" in lines
    assert "DISK" not in "\n".join(ln for ln in invoke("status").splitlines()
                                    if ln.startswith("mira"))


def test_on_a_server_the_citizens_own_config_sets_no_budget(
        civ: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: raise one's own budget in the home's config.json."""
    rules = tmp_path / "etc"
    rules.mkdir()
    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(rules))
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)  # server mode
    monkeypatch.setenv(disk.STATE_ENV, str(tmp_path / "disk-state"))
    (rules / "opus.json").write_text(json.dumps({"budget": {"max_home_mb": 2}}))
    budget(civ, "opus", 100000)  # its own file: ignored on a server
    fill(civ / "opus" / "work" / "big.bin", 3)
    (verdict,) = disk.check(["opus"])
    assert (verdict.state, verdict.budget_mb) == ("over", 2)


def test_enforcing_stops_the_unit_of_a_citizen_past_its_budget(
        civ: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    if os.geteuid() != 0:
        pytest.skip("enforcing is root's")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "systemctl.log"
    stand_in = bin_dir / "systemctl"
    stand_in.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)
    monkeypatch.setenv(disk.STATE_ENV, str(tmp_path / "disk-state"))
    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(tmp_path / "etc"))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "opus.json").write_text(json.dumps({"budget": {"max_home_mb": 2}}))
    fill(civ / "opus" / "work" / "big.bin", 3)
    verdicts = {v.citizen: v for v in disk.check(["opus", "mira"], enforce=True)}
    assert calls.read_text().splitlines() == [  # its daemon, and its wake (the scheduler's)
        "is-active --quiet citizen@opus.service", "stop --no-block citizen@opus.service",
        "is-active --quiet citizen-wake@opus.service",
        "stop --no-block citizen-wake@opus.service"]
    assert verdicts["opus"].stopped_at and verdicts["mira"].stopped_at is None
    assert "systemctl start citizen@opus" in caplog.text  # the journal names the fix
    assert disk.last("opus") == verdicts["opus"]  # recorded for `citizen status`
