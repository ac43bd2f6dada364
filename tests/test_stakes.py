"""Stakes come from the actions: the classifier, including the cases that must be high."""

from __future__ import annotations

import pytest

from shared.consensus.stakes import action_stakes, classify, command_stakes, threshold_met


@pytest.mark.parametrize(("command", "level"), [
    ("ls -la", "low"),
    ("cat a.md | grep hello", "low"),
    ("git status && git log -3", "low"),
    ("pytest -q tests", "medium"),
    ("python -m pytest -q", "medium"),
    ("make build", "medium"),
    ("rm -rf /", "high"),
    ("ls; rm notes.md", "high"),
    ("echo hi > README.md", "high"),
    ("echo hi >> README.md", "high"),
    ("git push origin main", "high"),
    ("git reset --hard HEAD~3", "high"),
    ("python -c 'import shutil; shutil.rmtree(\"/\")'", "high"),
    ("bash -c 'ls'", "high"),
    ("cat $(rm x)", "high"),
    ("sudo ls", "high"),
    ("echo 'unterminated", "high"),
    ("find . -name x 2>&1", "low"),
    ("find . -name '*.pyc' -delete", "high"),
    ("find . -exec rm {} ;", "high"),
])
def test_shell_commands(command: str, level: str) -> None:
    assert command_stakes(command)[0] == level


@pytest.mark.parametrize(("action", "level"), [
    ({"tool": "read_file", "args": {"path": "a.md"}}, "low"),
    ({"tool": "list_files", "args": {"path": "."}}, "low"),
    ({"tool": "write_file", "args": {"path": "hello.md", "content": "x"}}, "medium"),
    ({"tool": "edit_file", "args": {"path": "notes/a.md"}}, "medium"),
    ({"tool": "run_tests", "args": {"command": "pytest -q"}}, "medium"),
    ({"tool": "delete_file", "args": {"path": "hello.md"}}, "high"),
    ({"tool": "write_file", "args": {"path": "baseline/citizen/wake.py"}}, "high"),
    ({"tool": "write_file", "args": {"path": "templates/values.yaml"}}, "high"),
    ({"tool": "write_file", "args": {"path": "docs/DESIGN.md"}}, "high"),
    ({"tool": "run_tests", "args": {"command": "rm -rf tests"}}, "high"),
    ({"tool": "deploy", "args": {}}, "high"),
    ({"tool": "onboard_citizen", "args": {"name": "zed"}}, "high"),
])
def test_actions(action: dict[str, object], level: str) -> None:
    assert action_stakes(action)[0] == level


def test_a_proposal_takes_its_highest_action_and_explains_each() -> None:
    level, reasons = classify([{"tool": "read_file", "args": {"path": "a"}},
                               {"tool": "write_file", "args": {"path": "b", "content": ""}},
                               {"tool": "run", "args": {"command": "rm b"}}])
    assert level == "high"
    assert [r.split(":")[0] for r in reasons] == ["low", "medium", "high"]


def test_thresholds() -> None:
    assert threshold_met("low", 2, 3) and not threshold_met("low", 1, 3)
    assert threshold_met("medium", 3, 3) and not threshold_met("medium", 2, 3)
    assert threshold_met("high", 3, 3) and not threshold_met("high", 2, 3)
