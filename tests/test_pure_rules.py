"""The rules modules are pure by construction: no I/O, no clock, no process state.

Each protocol's rules (`shared.consensus.rules`, `stakes`, `gaming`, `shared.debates.rules`
and `moves`, `shared.streams.decision`) take records in memory and return state; the
stores around them do the reading and writing. This reads their source and fails on
an import or call that would let a rule touch a file, the clock or the environment.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from citizen.config import paths

PURE = ["shared/consensus/rules.py", "shared/consensus/stakes.py", "shared/consensus/gaming.py",
        "shared/debates/rules.py", "shared/debates/moves.py", "shared/streams/decision.py"]
FORBIDDEN_MODULES = {"os", "io", "pathlib", "time", "datetime", "subprocess", "socket",
                     "shutil", "tempfile", "sqlite3", "fcntl", "git", "shared.atomic",
                     "shared.documents", "shared.locks", "shared.threads", "shared.clock",
                     "shared.doorbell"}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


def _problems(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names
                      if a.name.split(".")[0] in FORBIDDEN_MODULES or a.name in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module in FORBIDDEN_MODULES or node.module.split(".")[0] in FORBIDDEN_MODULES):
            found.append(f"from {node.module} import …")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{node.func.id}(…) at line {node.lineno}")
    return found


@pytest.mark.parametrize("module", PURE)
def test_a_rules_module_does_no_io(module: str) -> None:
    source = (paths.project_dir() / module).read_text(encoding="utf-8")
    assert _problems(source) == [], f"{module} is not pure"


def test_the_check_catches_io() -> None:
    """It can fail: a rule that reads a file, or asks the clock, is caught."""
    assert _problems("import time\ndef f():\n    return time.time()\n") == ["import time"]
    assert _problems("from shared.atomic import read_json\n") == ["from shared.atomic import …"]
    assert _problems("def f(p):\n    return open(p).read()\n") == ["open(…) at line 2"]
    assert Path(paths.project_dir() / PURE[0]).is_file()
