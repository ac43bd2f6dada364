"""The rules modules are pure by construction: no I/O, no clock, no process state,
not even through what they import.

Each protocol's rules (`shared.consensus.rules`, `stakes`, `gaming`, `rubric`, the
weights arithmetic `weighing`; `shared.debates.rules`, `state`, `moves`, `crux`;
`shared.streams.decision` and the rooms' `temperature`) take records in memory and
return state; the stores around them do the reading and writing. This walks each one's
imports transitively (grimp's graph of `shared`, the standard library and third-party
packages included as top-level names) and fails on

- a module it reaches, directly or not, that can touch a file, the clock, the
  environment or a log (`os`, `pathlib`, `time`, `logging`, `shared.atomic`, …),
- a module of `shared` it reaches that is not itself listed pure here (so purity is
  checked by induction, not trusted), and
- a call of `open`, `print`, `exec` … in any module of `shared` it reaches.
"""

from __future__ import annotations

import ast
import functools

import grimp
import pytest

from citizen.config import paths

PURE = ["shared.consensus.rules", "shared.consensus.stakes", "shared.consensus.gaming",
        "shared.consensus.rubric", "shared.consensus.weighing", "shared.consensus.tasks",
        "shared.consensus.calls",
        "shared.debates.rules", "shared.debates.state", "shared.debates.moves",
        "shared.debates.crux", "shared.debates.grading", "shared.streams.decision",
        "shared.streams.temperature", "shared.streams.floor", "shared.change_rules"]
ALSO_PURE = {"shared.errors"}  # exception classes only: a rule may raise them
FORBIDDEN_MODULES = {"os", "io", "pathlib", "time", "datetime", "subprocess", "socket",
                     "shutil", "tempfile", "sqlite3", "fcntl", "git", "logging", "sys",
                     "yaml", "secrets", "urllib", "http", "asyncio", "threading",
                     "multiprocessing", "signal", "glob", "filelock", "shared.atomic",
                     "shared.documents", "shared.locks", "shared.threads", "shared.clock",
                     "shared.doorbell", "shared.records", "shared.layout"}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}


@functools.cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("shared", include_external_packages=True)


def _calls(source: str) -> list[str]:
    return [f"{node.func.id}(…) at line {node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS]


def _problems(graph: grimp.ImportGraph, module: str) -> list[str]:
    """Every impure module `module` reaches, each with the chain of imports to it."""
    def via(target: str) -> str:
        return " -> ".join(graph.find_shortest_chain(importer=module, imported=target) or ())

    found = []
    reached = graph.find_upstream_modules(module)
    for m in sorted(reached):
        top = m.split(".")[0]
        if top in FORBIDDEN_MODULES:
            found.append(f"imports {m} ({via(m)})")
        elif top == "shared" and m not in PURE and m not in ALSO_PURE:
            found.append(f"imports {m}, not a pure module ({via(m)})")
    return found


def _source(module: str) -> str:
    path = paths.project_dir() / (module.replace(".", "/") + ".py")
    if not path.is_file():
        path = path.with_suffix("") / "__init__.py"
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("module", PURE)
def test_a_rules_module_does_no_io_even_through_its_imports(module: str) -> None:
    assert module in _graph().modules, f"{module} is gone: update PURE"
    problems = _problems(_graph(), module)
    assert not problems, f"{module} is not pure:\n" + "\n".join(problems)
    reached = {m for m in _graph().find_upstream_modules(module) if m.startswith("shared.")}
    calls = [f"{m} calls {c}" for m in sorted({module} | reached) for c in _calls(_source(m))]
    assert not calls, f"{module} is not pure:\n" + "\n".join(calls)


def test_the_check_catches_io_however_far_away() -> None:
    """It can fail: a rule that imports (through a pure-looking helper) a module that
    reads files or the clock, or a helper that calls open(), is caught."""
    graph = grimp.ImportGraph()
    for m in ("shared.consensus.rules", "shared.consensus.helper", "shared.atomic", "pathlib",
              "shared.errors"):
        graph.add_module(m)
    graph.add_import(importer="shared.consensus.rules", imported="shared.consensus.helper")
    graph.add_import(importer="shared.consensus.helper", imported="shared.atomic")
    graph.add_import(importer="shared.atomic", imported="pathlib")
    graph.add_import(importer="shared.consensus.rules", imported="shared.errors")
    assert _problems(graph, "shared.consensus.rules") == [
        "imports pathlib (shared.consensus.rules -> shared.consensus.helper -> "
        "shared.atomic -> pathlib)",
        "imports shared.atomic, not a pure module (shared.consensus.rules -> "
        "shared.consensus.helper -> shared.atomic)",
        "imports shared.consensus.helper, not a pure module (shared.consensus.rules -> "
        "shared.consensus.helper)"]
    assert _calls("def f(p):\n    return open(p).read()\n") == ["open(…) at line 2"]
