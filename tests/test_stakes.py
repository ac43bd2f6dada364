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
    ({"tool": "write_file", "args": {"path": "baseline/citizen/wake/flow.py"}}, "high"),
    ({"tool": "write_file", "args": {"path": "templates/values.yaml"}}, "high"),
    ({"tool": "write_file", "args": {"path": "docs/DESIGN.md"}}, "high"),
    ({"tool": "run_tests", "args": {"command": "rm -rf tests"}}, "high"),
    ({"tool": "deploy", "args": {}}, "high"),
    ({"tool": "onboard_citizen", "args": {"name": "zed"}}, "high"),
])
def test_actions(action: dict[str, object], level: str) -> None:
    assert action_stakes(action)[0] == level


@pytest.mark.parametrize("command", [
    "cat <(rm -rf ../../shared/values)",  # process substitution runs any command
    "ls 1>README.md", "ls 2>f", "ls >&file",  # numbered redirects write files
    "sort -o README.md /dev/null", "uniq /dev/null README.md", "tree -o README.md",
    "git log --output=README.md", "git diff --output=README.md",
    "find . -maxdepth 0 -fprint README.md", "rg --pre bash . notes",
    "git branch --delete --force old", "git branch -f main HEAD~3",
    "pytest --basetemp=../../shared/values -q", "python -m pytest -p evil",
    "git stash clear", "git stash drop", "git switch --discard-changes main", "git tag -d v1",
])
def test_options_that_write_run_code_or_lose_work_are_high(command: str) -> None:
    """Found by an adversarial review (issue 19): each was low or medium by its program's
    name alone, and each writes a file, runs other code or deletes."""
    assert command_stakes(command)[0] == "high", command_stakes(command)


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
    for sneaky in ("make --eval='x:=${shell touch pwned}'", "make -f /tmp/anything",
                   "make -C /home/someone-else", "make SHELL=/tmp/evil", "npm publish"):
        assert command_stakes(sneaky, frozenset({"make", "npm install"}))[0] == "high", sneaky
    assert command_stakes("npm install left-pad", frozenset({"npm install"}))[0] == "medium"
    run = {"tool": "run", "args": {"command": "make"}}
    assert classify([run])[0] == "high" and classify([run], listed)[0] == "medium"


def test_the_operators_list_reaches_every_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """The allow-list is the operator's file, read by every reader of a proposal; a
    malformed one counts as empty (the safe side) and says what to write - it stops no
    reader (an adversarial review found one typo stopped every wake)."""
    from citizen import civilization, config
    from citizen.admin import founding

    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(tmp_path))
    assert config.medium_programs() == frozenset()
    (tmp_path / "stakes.json").write_text('{"medium_programs": ["make"]}')
    assert config.medium_programs() == frozenset({"make"})
    monkeypatch.setenv("CIV_ROOT", str(tmp_path / "civ"))
    founding.init(["opus", "mira", "aria"])
    c = civilization.commons().consensus
    pid = c.request("build", "opus", "operator").id
    body = {"goal": "build it", "actions": [{"tool": "run", "args": {"command": "make"}}],
            "value_justification": {"truth": "the build output shows exactly what was made"},
            "expected_outcomes": ["the build passes"]}
    assert c.propose(pid, "opus", body).stakes == "medium"
    (tmp_path / "stakes.json").write_text('{"medium_programs": []}')
    assert civilization.commons().consensus.load(pid).stakes == "high"
    for bad in (b'{"medium_programs": ["/usr/bin/make"]}', b'{"medium_programs": "make"}',
                b"\xff{}"):
        (tmp_path / "stakes.json").write_bytes(bad)
        assert config.medium_programs() == frozenset()
        assert civilization.commons().consensus.load(pid).stakes == "high"


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
