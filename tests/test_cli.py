"""The `citizen` command through click's CliRunner (and a real subprocess for imports)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from citizen.cli import cli
from citizen.config import paths
from tests.anthropic_server import API_KEY, MessagesServer, text


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def anthropic_env(messages_api: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> MessagesServer:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
    return messages_api


def test_help_and_cheap_paths_never_import_the_sdk() -> None:
    code = (
        "import sys\n"
        "from citizen.cli import cli\n"
        "for args in (['--help'], ['doctor', '--help'], ['ask', '--help']):\n"
        "    try:\n"
        "        cli(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('SDK-IMPORTED' if 'anthropic' in sys.modules else 'NO-SDK')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=paths.project_dir()).stdout
    assert "doctor" in out and "ask" in out
    assert out.strip().endswith("NO-SDK")


@pytest.mark.model
def test_doctor_passes_on_the_embedded_model(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "auto: no ANTHROPIC_API_KEY" in result.output
    assert "gemma-3-270m-q4_k_m" in result.output
    assert result.output.rstrip().endswith("doctor: all good")


@pytest.mark.model
def test_doctor_json(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["doctor", "--json", "--citizen", "aria"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    assert {c["status"] for c in report["checks"]} <= {"ok", "warn"}
    names = [c["name"] for c in report["checks"]]
    assert names[:2] == ["templates", "citizen"] and names[-1] == "model call"
    assert report["checks"][1]["detail"].startswith("aria from")  # the citizen asked for


def test_doctor_against_the_messages_api(runner: CliRunner, anthropic_env: MessagesServer) -> None:
    anthropic_env.reply(text("ready", input_tokens=12, output_tokens=2))
    result = runner.invoke(cli, ["doctor", "--citizen", "mira"])
    assert result.exit_code == 0, result.output
    assert "anthropic (auto: ANTHROPIC_API_KEY is set)" in result.output
    # The doctor's call is a fast-tier call: mira's fast seat is Haiku, $1/$5 per MTok.
    assert anthropic_env.requests[0]["model"] == "claude-haiku-4-5"
    assert "$0.000022" in result.output
    assert API_KEY not in result.output


def test_doctor_fails_with_the_api_error(runner: CliRunner, anthropic_env: MessagesServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-wrong")
    result = runner.invoke(cli, ["doctor"])
    assert result.exit_code == 1
    assert "FAIL  model call" in result.output and "HTTP 401" in result.output
    assert "sk-wrong" not in result.output


def test_doctor_reports_a_broken_template(runner: CliRunner, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "templates"
    shutil.copytree(paths.project_dir() / "templates", broken)
    (broken / "wake_allocations.json").write_text("{")
    monkeypatch.setenv("EXPERIENCE_TEMPLATES", str(broken))
    result = runner.invoke(cli, ["doctor"])
    assert result.exit_code == 1
    assert "FAIL  config" in result.output
    assert "wake_allocations.json: not valid JSON" in result.output
    assert "Traceback" not in result.output


def test_doctor_flags_a_readable_env_file(runner: CliRunner, civ_root: Path,
                                          anthropic_env: MessagesServer) -> None:
    anthropic_env.reply(text("ready"))
    home = civ_root / "opus"
    home.mkdir(mode=0o750)
    env = home / ".env"
    env.write_text("EMAIL_PASS=secret\n")
    env.chmod(0o644)
    result = runner.invoke(cli, ["doctor"])
    assert result.exit_code == 1
    assert f"chmod 600 {env}" in result.output
    env.chmod(0o600)
    anthropic_env.reply(text("ready"))
    assert runner.invoke(cli, ["doctor"]).exit_code == 0


@pytest.mark.model
def test_ask_on_the_embedded_model(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["ask", "--max-tokens", "8", "Say hi"])
    assert result.exit_code == 0, result.output
    stats = result.output.strip().splitlines()[-1]
    assert stats.startswith("-- gemma-3-270m-q4_k_m via local")
    tokens = re.search(r": (\d+) in, (\d+) out, ", stats)
    assert tokens and int(tokens[1]) > 0 and int(tokens[2]) <= 8, stats
    assert "; $0.000000; " in stats


def test_ask_json_against_the_messages_api(runner: CliRunner,
                                           anthropic_env: MessagesServer) -> None:
    anthropic_env.reply(text("Hello, operator.", model="claude-opus-4-6", input_tokens=1000,
                             output_tokens=100, cache_read=2000))
    result = runner.invoke(cli, ["ask", "--json", "Say hello"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["text"] == "Hello, operator." and out["provider"] == "anthropic"
    assert out["cost_usd"] == pytest.approx((1000 * 5 + 100 * 25 + 2000 * 0.5) / 1e6)
    sent = anthropic_env.requests[0]
    assert sent["messages"] == [{"role": "user", "content": "Say hello"}]
    # The shared block first (an hour: every citizen's), then the citizen's own.
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert sent["system"][1]["cache_control"] == {"type": "ephemeral"}
    assert "opus" not in sent["system"][0]["text"]
    assert "You are opus" in sent["system"][1]["text"]


def test_ask_without_a_key_for_anthropic_names_the_fix(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["ask", "--provider", "anthropic", "hi"])
    assert result.exit_code == 1
    assert "needs an API key" in result.output + (result.stderr or "")
    assert isinstance(result.exception, SystemExit)  # an exit, not a crash


def test_root_option_sets_the_civilization_root(runner: CliRunner, tmp_path: Path,
                                                anthropic_env: MessagesServer) -> None:
    anthropic_env.reply(text("ready"))
    root = tmp_path / "elsewhere"
    result = runner.invoke(cli, ["--root", str(root), "doctor"])
    assert result.exit_code == 0, result.output
    assert f"{root}/opus does not exist yet" in result.output
    assert os.environ["CIV_ROOT"] == str(root)
