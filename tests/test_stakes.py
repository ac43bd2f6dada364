"""Stakes come from the actions: the classifier, including the cases that must be high."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.consensus.stakes import action_stakes, classify, command_stakes, threshold_met


@pytest.mark.parametrize(("command", "level"), [
    ("ls -la", "low"),
    ("cat a.md | grep hello", "low"),
    ("git status && git log -3", "low"),
    ("pytest -q tests", "medium"),
    ("python -m pytest -q", "medium"),
    ("make build", "high"),  # unknown programs are high (issue 19: it was medium)
    ("npm install", "high"),
    ("pip install requests", "high"),
    ("./scripts/deploy.sh", "high"),
    ("git add notes.md && git commit -m x", "medium"),
    ("git config core.hooksPath /tmp/evil", "high"),
    ("git -c core.hooksPath=/tmp/evil commit -m x", "high"),
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


def test_only_the_operators_list_makes_an_unknown_program_medium() -> None:
    """Issue 19: `make`, `npm install`, any script were medium - a proposal could run
    unknown code with no person looking. Now high, unless the operator lists the program
    by name; a program at another path, or a destructive one, stays high."""
    listed = frozenset({"make", "npm", "rm"})
    assert command_stakes("make build")[0] == "high"
    assert command_stakes("make build", listed)[0] == "medium"
    assert command_stakes("npm install && pytest -q", listed)[0] == "medium"
    assert command_stakes("./make build", listed)[0] == "high"
    assert command_stakes("/tmp/x/make", listed)[0] == "high"
    assert command_stakes("rm -rf notes", listed)[0] == "high"  # destructive stays high
    run = {"tool": "run", "args": {"command": "make"}}
    assert classify([run])[0] == "high" and classify([run], listed)[0] == "medium"


def test_the_operators_list_reaches_every_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """The allow-list is the operator's file, read by every reader of a proposal; a
    malformed one is refused saying what to write."""
    from citizen import civilization, config
    from citizen.errors import ConfigError

    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(tmp_path))
    assert config.medium_programs() == frozenset()
    (tmp_path / "stakes.json").write_text('{"medium_programs": ["make"]}')
    assert config.medium_programs() == frozenset({"make"})
    monkeypatch.setenv("CIV_ROOT", str(tmp_path / "civ"))
    civilization.init(["opus", "mira", "aria"])
    c = civilization.commons().consensus
    pid = c.request("build", "opus", "operator").id
    body = {"goal": "build it", "actions": [{"tool": "run", "args": {"command": "make"}}],
            "value_justification": {"truth": "the build output shows exactly what was made"},
            "expected_outcomes": ["the build passes"]}
    assert c.propose(pid, "opus", body).stakes == "medium"
    (tmp_path / "stakes.json").write_text('{"medium_programs": []}')
    assert civilization.commons().consensus.load(pid).stakes == "high"
    (tmp_path / "stakes.json").write_text('{"medium_programs": ["/usr/bin/make"]}')
    with pytest.raises(ConfigError, match="names, no paths"):
        config.medium_programs()


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
