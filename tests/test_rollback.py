"""A broken self-edit rolls back by itself: after three crashed wakes, and after three
failed starts (the start guard). The daemon and its wakes run the citizen's own ~/code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import git

from citizen.config import paths
from shared.evolution import Evolution
from tests.anthropic_server import MessagesServer
from tests.daemons import daemon_env, wait_for, worker


def break_it(code: Path, file: str, line: str) -> str:
    repo = git.Repo(code)
    with (code / file).open("a") as fh:
        fh.write(f"\n{line}\n")
    repo.index.add([file])
    return str(repo.index.commit(f"deliberately broken: {file}").hexsha)


def marks(civ: Path) -> dict[str, str]:
    try:
        found: dict[str, str] = json.loads((civ / "opus" / "state.json").read_text())["marks"]
    except (OSError, ValueError):
        return {}
    return found


def test_three_crashed_wakes_roll_the_code_back(civ: Path, own_code: Path,
                                                messages_api: MessagesServer) -> None:
    messages_api.responder = worker
    env = {**daemon_env(civ, messages_api), "PYTHONPATH": str(own_code)}
    good = str(git.Repo(own_code).head.commit.hexsha)
    proc = subprocess.Popen([sys.executable, "-m", "citizen", "run", "opus", "--interval",
                             "0.5", "--first-wake", "0"], env=env, cwd=own_code,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: marks(civ).get("last_known_good") == good, timeout=60)
        broken = break_it(own_code, "citizen/wake/types/__init__.py",
                          'raise RuntimeError("deliberately broken self-edit")')
        evolution = Evolution(civ / "shared", ["opus", "mira", "aria"], False)
        change = evolution.announce("opus", own_code, "break wakes", "nothing good")
        wait_for(lambda: git.Repo(own_code).head.commit.hexsha == good, timeout=90)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert f"broken/{broken[:12]}" in [b.name for b in git.Repo(own_code).branches]
    (entry,) = [json.loads(x) for x in (civ / "opus" / "logs" / "rollbacks.jsonl")
                .read_text().splitlines()]
    assert entry["from"] == broken and entry["to"] == good
    assert "3 wakes in a row crashed" in entry["reason"]
    assert evolution.get(change.id).reports["opus"]["outcome"] == "failed"
    assert f"filed 'failed' for {change.id}" in out


def test_three_failed_starts_roll_the_code_back_and_report_the_change_failed(
        civ: Path, own_code: Path, messages_api: MessagesServer) -> None:
    env = {**daemon_env(civ, messages_api), "PYTHONPATH": str(own_code)}
    home = civ / "opus"
    good = str(git.Repo(own_code).head.commit.hexsha)
    (home / "state.json").write_text(json.dumps(
        {"schema_version": 1, "wakes": 0, "slots": 0, "marks": {"last_known_good": good}}))
    broken = break_it(own_code, "citizen/daemon/process.py",
                      'raise RuntimeError("deliberately broken daemon")')
    evolution = Evolution(civ / "shared", ["opus", "mira", "aria"], False)
    change = evolution.announce("opus", own_code, "break the daemon", "nothing good")
    # What the citizen's sandboxed shell can plant in its own ~/code/.git (issue 28,
    # break 6): the guard runs git outside the sandbox, and must run none of it.
    pwned = civ / "pwned"
    repo = git.Repo(own_code)
    with repo.config_writer() as cfg:
        cfg.set_value("core", "fsmonitor", f"touch {pwned}-fsmonitor; false")
    hook = own_code / ".git" / "hooks" / "reference-transaction"
    hook.write_text(f"#!/bin/sh\ntouch {pwned}-hook\n")
    hook.chmod(0o755)
    guard = paths.project_dir() / "scripts" / "start_guard.py"
    codes = []
    for _ in range(5):  # what systemd's Restart=on-failure does, with ExecStartPre=guard
        subprocess.run([sys.executable, str(guard), str(home)], check=True, env=env)
        run = subprocess.run([sys.executable, "-m", "citizen", "run", "opus", "--interval",
                              "0.2", "--first-wake", "0", "--max-wakes", "1"], env=env,
                             cwd=own_code, capture_output=True, text=True, timeout=120,
                             check=False)
        codes.append(run.returncode)
        if run.returncode == 0:
            break
    assert codes == [1, 1, 1, 0]  # three failed starts, then the rolled-back code runs
    assert list(civ.glob("pwned*")) == []  # no planted fsmonitor or hook ran
    assert git.Repo(own_code).head.commit.hexsha == good
    assert f"broken/{broken[:12]}" in [b.name for b in git.Repo(own_code).branches]
    assert not (home / ".start_attempts").exists()  # cleared at READY
    # the guard cannot file reports (stdlib only); the first good start files them
    report = evolution.get(change.id).reports["opus"]
    assert report["outcome"] == "failed"
    assert "failed to start 3 times" in report["note"]
    assert os.environ.get("CIV_ROOT") == str(civ)
