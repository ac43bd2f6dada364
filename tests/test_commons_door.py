"""The citizen reaches the commons through one door: `citizen.civilization` builds every
protocol handle (and `citizen.config.paths` the commons' layout), so a second backend or
a changed protocol is wired in one place. The broker, a process of its own, builds its
own. Names of types, constants and pure helpers may be imported anywhere below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import shared.layout
from shared import commons, dry, dyntools, evolution, goals, library, monitor, threads
from shared.consensus import episodes, justifications, reading, store, view, world
from shared.debates import store as debates_store
from shared.streams import rooms, semaphore
from shared.streams import store as streams_store

ROOT = Path(__file__).resolve().parents[1]
# Every class of the commons whose instance reads or writes the shared directory.
HANDLES = {cls.__name__ for mod in (
    commons, dry, dyntools, evolution, goals, library, monitor, threads, episodes,
    justifications, reading, store, view, world, debates_store, rooms, semaphore,
    streams_store) for cls in vars(mod).values()
    if isinstance(cls, type) and cls.__module__ == mod.__name__}
DOORS = {"citizen/civilization.py": HANDLES, "citizen/config/paths.py": {"Layout"}}


def built(source: str, names: set[str]) -> list[tuple[int, str]]:
    """Where `source` calls one of `names` (as `Name(...)` or `module.Name(...)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if name in names:
                found.append((node.lineno, name))
    return found


def test_the_check_sees_a_handle_built_behind_the_door() -> None:
    assert built("from shared.consensus import Consensus\nc = Consensus(root)\n",
                 HANDLES) == [(2, "Consensus")]
    assert built("import shared.library as lib\nx = lib.Library(root)\n",
                 HANDLES) == [(2, "Library")]
    assert built("x = shared.layout.Layout(root)\n", {"Layout"}) == [(1, "Layout")]


def test_the_commons_protocols_are_built_only_at_the_door() -> None:
    assert {"Commons", "Consensus", "Debates", "Streams", "Evolution", "Library",
            "DynTools", "Monitor", "Threads", "Semaphore"} <= HANDLES
    assert shared.layout.Layout.__name__ == "Layout"
    behind = []
    for path in sorted((ROOT / "citizen").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("citizen/broker/"):
            continue  # the broker's own process holds its own handles
        allowed = DOORS.get(rel, set())
        behind += [f"{rel}:{line} builds {name}" for line, name in
                   built(path.read_text(encoding="utf-8"), (HANDLES | {"Layout"}) - allowed)]
    assert behind == [], "go through citizen.civilization (or paths.commons_layout())"
