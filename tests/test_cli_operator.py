"""The operator's commands: init, task add, wake, status, logs, tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from citizen.cli import cli
from citizen.config import paths
from citizen.home.tasks import TaskQueue


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_init_creates_the_tree_and_is_idempotent(civ_root: Path) -> None:
    first = invoke("init", "--root", str(civ_root))
    assert "citizens opus, mira, aria" in first
    home = civ_root / "opus"
    assert oct(home.stat().st_mode & 0o777) == "0o750"
    assert oct((home / ".env").stat().st_mode & 0o777) == "0o600"
    assert oct((civ_root / "shared").stat().st_mode & 0o7777) == "0o3775"
    assert (home / "contexts" / "identity.json").is_file()
    (home / "contexts" / "identity.json").write_text('{"schema_version":1,"entries":[],"meta":{}}')
    assert "(already complete)" in invoke("init", "--root", str(civ_root))
    assert json.loads((home / "contexts" / "identity.json").read_text())["entries"] == []


def test_task_add_queues_and_rings(civ: Path) -> None:
    out = invoke("task", "add", "aria", "Write a poem", "--kind", "RESEARCH")
    (task_id,) = TaskQueue(paths.home("aria").tasks).ids("queue")
    assert task_id in out
    (ring,) = (civ / "shared" / "doorbell" / "aria").glob("*.json")
    assert json.loads(ring.read_text())["wake_type"] == "RESEARCH"
    listed = json.loads(invoke("task", "list", "aria", "--json"))
    assert listed[0]["id"] == task_id and listed[0]["state"] == "queue"


def test_wake_status_and_logs(civ: Path) -> None:
    out = json.loads(invoke("wake", "opus", "--json"))
    assert (out["wake_type"], out["status"], out["calls"]) == ("REFLECT", "idle", 0)
    status = json.loads(invoke("status", "--json"))
    opus = next(r for r in status if r["citizen"] == "opus")
    assert opus["daemon"] == "not running"
    assert opus["last_wake"]["status"] == "idle" and opus["wakes_today"] == 1
    table = invoke("logs", "opus")
    assert "REFLECT" in table and "idle" in table
    transcript = invoke("logs", "opus", "--wake", "1")
    assert "gate: idle - nothing new since the reflection" in transcript
    assert "wake ended: idle" in transcript


def test_tool_runs_any_tool_as_a_citizen(civ: Path) -> None:
    out = invoke("tool", "mira", "write_file", '{"path": "notes/x.md", "content": "hi"}')
    assert "wrote 2 characters" in out
    assert (civ / "mira" / "notes" / "x.md").read_text() == "hi"
    bad = CliRunner().invoke(cli, ["tool", "mira", "read_file", '{"path": 3}'])
    assert bad.exit_code == 1 and "do not match" in bad.output


def test_status_and_logs_never_import_the_sdk(civ: Path) -> None:
    code = ("import sys\nfrom citizen.cli import cli\n"
            "for args in (['status'], ['logs', 'opus'], ['task', 'add', 'opus', 'x'],"
            " ['wake', 'opus', '--type', 'REFLECT']):\n"
            "    try:\n        cli(args)\n    except SystemExit:\n        pass\n"
            "print('SDK-IMPORTED' if 'anthropic' in sys.modules else 'NO-SDK')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().endswith("NO-SDK")


def test_the_noun_groups_and_the_old_names_for_one_release(civ: Path) -> None:
    """`citizen proposal|debate|stream <verb>` is the interface; the names before it still
    run the same command, hidden from help, with a note on stderr naming the new one."""
    new = CliRunner().invoke(cli, ["proposal", "start", "--by", "opus", "Create hi.md"])
    assert new.exit_code == 0 and new.stdout.startswith("opened prop-"), new.output
    listed = CliRunner().invoke(cli, ["proposal", "list", "--json"])
    old = CliRunner().invoke(cli, ["proposals", "--json"])
    assert listed.exit_code == old.exit_code == 0
    assert json.loads(listed.stdout) == json.loads(old.stdout) and len(json.loads(old.stdout)) == 1
    assert listed.stderr == ""
    assert f"`citizen proposals` is now `citizen --root {civ} proposal list`" in old.stderr
    for group, verb in (("debate", "list"), ("stream", "list")):
        assert CliRunner().invoke(cli, [group, verb]).exit_code == 0
    top = CliRunner().invoke(cli, ["--help"]).stdout
    assert "proposal" in top and "stream" in top
    assert not any(f"  {old_name} " in top for old_name in ("proposals", "decisions", "say"))
