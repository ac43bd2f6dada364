"""owed() with many proposals on disk: what a CONSENSUS gate costs as a civilization ages.

Writes N proposals' records straight to a temporary commons (most finished - proposed,
handed to a human, rejected, recorded - and a few pending at the verifier), then
times `Consensus.owed(verifier)` on a fresh object (cold: the first gate of a
process) and again on the same object (warm: every later gate and step of a daemon).

    .venv/bin/python bench/owed.py                       # this checkout
    git worktree add /tmp/old 1070220                    # the code before issue 14
    .venv/bin/python bench/owed.py --old /tmp/old        # both, on the same records
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CITIZENS = ("opus", "mira", "aria")
PROFILES = {"opus": "executor", "mira": "verifier", "aria": "integrator"}
ROLES = {"executor": "opus", "verifier": "mira", "integrator": "aria"}


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _step(who: str, **body: Any) -> dict[str, Any]:
    # Both author keys: the code before issue 14 reads "citizen", the code after "author".
    return {**body, "citizen": who, "author": who, "ts": "2026-01-01T00:00:00Z"}


def make_commons(shared: Path, count: int, pending: int) -> None:
    """`count` proposals: all but `pending` finished (rejected by a human, recorded)."""
    for state in ("pending", "approved", "rejected"):
        (shared / "proposals" / state).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        pid = f"prop-20260101T{i:06d}-{i % 65536:04x}"
        folder = shared / "proposals" / "records" / pid
        _write(folder / "request.json", {"id": pid, "task": f"task {i}", "roles": ROLES,
                                         "requested_by": "opus", "source": {},
                                         "ts": "2026-01-01T00:00:00Z"})
        _write(folder / "proposal-01.json", _step(
            "opus", goal=f"Write note {i}", round=1, level="proposal", cites=[],
            actions=[{"tool": "write_file", "args": {"path": f"n{i}.md", "content": "x"}}],
            value_justification={"truth": f"note {i} says exactly what was found",
                                 "care": f"note {i} helps whoever reads it next"},
            expected_outcomes=[f"n{i}.md exists"], risk_assessment=[]))
        finished = i < count - pending
        state = "rejected" if finished else "pending"
        if finished:
            _write(folder / "giveup-01.json", _step("mira", phase="verify", why="bench"))
            _write(folder / "human.json", {"operator": "root", "decision": "reject",
                                           "why": "bench", "ts": "2026-01-01T00:00:00Z",
                                           "relayed_by": "", "message_id": ""})
            _write(folder / "episode.json", _step("aria", id=f"ep-{i}", proposal=pid))
        _write(shared / "proposals" / state / f"{pid}.json", {"id": pid, "status": state})


def measure(shared: Path, repeats: int) -> dict[str, list[float]]:
    """Times of owed() in this interpreter's code (whichever checkout is on sys.path)."""
    from shared.consensus import Consensus

    try:
        values = importlib.import_module("shared.consensus.values")
    except ImportError:  # the code before the consensus package
        values = importlib.import_module("shared.values")
    root = Path(sys.modules["shared"].__file__ or "").resolve().parent.parent
    # the code before the pure weights arithmetic (consensus/weighing.py): Framework.load
    load = getattr(values, "load_framework", None) or values.Framework.load
    framework = load(root / "templates" / "values.yaml")
    cold, warm, owed = [], [], 0
    for _ in range(repeats):
        c = Consensus(shared, framework, PROFILES, CITIZENS, enforce_identity=False)
        started = time.perf_counter()
        owed = len(c.owed("mira"))
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        c.owed("mira")
        warm.append(time.perf_counter() - started)
    return {"cold": cold, "warm": warm, "owed": [float(owed)]}


def run_in(checkout: Path, shared: Path, repeats: int) -> dict[str, list[float]]:
    """measure() in another checkout's code, in a child process."""
    out = subprocess.run(
        [sys.executable, "-c", "import importlib.util, json, sys; from pathlib import Path; "
         "sys.path.insert(0, sys.argv[1]); "
         "spec = importlib.util.spec_from_file_location('owed_bench', sys.argv[2]); "
         "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); "
         "print(json.dumps(mod.measure(Path(sys.argv[3]), int(sys.argv[4]))))",
         str(checkout), __file__, str(shared), str(repeats)],
        env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True,
        check=True)
    result: dict[str, list[float]] = json.loads(out.stdout.splitlines()[-1])
    return result


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.stats import show

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old", type=Path, help="a checkout of the code to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-owed-") as tmp:
        shared = Path(tmp) / "shared"
        make_commons(shared, args.proposals, args.pending)
        runs = {"this checkout": run_in(Path(__file__).resolve().parent.parent, shared,
                                        args.repeats)}
        if args.old:
            runs[f"old ({args.old})"] = run_in(args.old.resolve(), shared, args.repeats)
    for label, r in runs.items():
        print(f"{label}: {args.proposals} proposals, {int(r['owed'][0])} owed to mira")
        show("  owed() on a new Consensus (cold)", r["cold"], "ms", 1000)
        show("  owed() again on the same object (warm)", r["warm"], "ms", 1000)
    if len(runs) == 2:
        new, old = runs.values()
        median = sorted(old["cold"])[len(old["cold"]) // 2] / sorted(new["cold"])[
            len(new["cold"]) // 2]
        warm = sorted(old["warm"])[len(old["warm"]) // 2] / sorted(new["warm"])[
            len(new["warm"]) // 2]
        print(f"old/new: cold {median:.1f}x, warm {warm:.1f}x")


if __name__ == "__main__":
    main()
