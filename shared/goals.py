"""Civilization goals: proposed by a citizen, advanced step by step by anyone.

`shared/goals/<id>.json` holds the goal and its steps (owned by its proposer);
`shared/goals/<id>.done/<step>-<citizen>.json` records a finished step. Progress is
derived - done steps over all steps - never stored (the seed's rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared import records
from shared.errors import Invalid, NotFound
from shared.layout import Layout


class Goals:
    def __init__(self, shared_dir: Path, enforce_identity: bool) -> None:
        self.dir = Layout(shared_dir).goals
        self.enforce = enforce_identity

    def propose(self, citizen: str, title: str, steps: list[str]) -> str:
        steps = [s.strip() for s in steps if s.strip()]
        if not steps:
            raise Invalid("a goal needs at least one step")
        gid = records.new_id("goal")
        records.write(self.dir, self.dir / f"{gid}.json", citizen,
                      {"id": gid, "title": title, "steps": steps})
        return gid

    def step_done(self, citizen: str, gid: str, step: int, note: str) -> dict[str, Any]:
        goal = self.get(gid)
        if not 0 <= step < len(goal["steps"]):
            raise Invalid(f"{gid} has steps 0 to {len(goal['steps']) - 1}")
        records.write(self.dir, self.dir / f"{gid}.done" / f"{step}-{citizen}.json", citizen,
                      {"note": note})
        return self.get(gid)

    def get(self, gid: str) -> dict[str, Any]:
        path = self.dir / f"{gid}.json"
        goal = records.read(path, None, self.enforce)
        if goal is None:
            raise NotFound(f"no goal {gid} - see civ_goals_list")
        done = sorted({int(p.stem.split("-", 1)[0])
                       for p in (self.dir / f"{gid}.done").glob("*.json")
                       if records.read(p, p.stem.split("-", 1)[-1], self.enforce) is not None})
        goal["done_steps"] = done
        goal["progress"] = f"{len(done)}/{len(goal['steps'])}"
        return goal

    def all(self) -> list[dict[str, Any]]:
        if not self.dir.is_dir():
            return []
        return [self.get(p.stem) for p in sorted(self.dir.glob("goal-*.json"))]
