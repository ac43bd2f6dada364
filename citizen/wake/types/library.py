"""LIBRARY wakes: review peers' proposed modules, or distill new experience into one."""

from __future__ import annotations

import json

from citizen import civilization
from citizen.home import state
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending
from citizen.wake.types.base import WORK_WAKES, Gate, Setup, WakeType

MARK = "library_through_wake"
TOLD = "library_rejections_told"  # the rounds of my rejected proposals a wake has shown me


class LibraryWake(WakeType):
    name = "LIBRARY"
    required_tools = ("library_pending", "library_review", "library_propose")

    def gate(self, setup: Setup) -> Gate:
        library = civilization.commons(setup.templates,
                                       approvals=setup.config.library_approvals).library
        me = setup.home.name
        to_review = library.awaiting(me)
        rejected = library.rejected(maintainer=me)
        untold = [r for r in rejected if r["round"] not in setup.marks.get(TOLD, [])]
        data = {"to_review": to_review, "rejected": rejected}
        if to_review:
            return Gate(True, f"{len(to_review)} proposals wait for my review", data)
        if untold:
            return Gate(True, f"peers rejected {len(untold)} of my proposals", data)
        latest = setup.memory.latest_wake(WORK_WAKES)
        done = int(setup.marks.get(MARK, 0))
        if latest > done:
            return Gate(True, f"experience from wakes up to {latest} not yet distilled", data)
        return Gate(False, "no proposals to review and no new experience")

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        text = setup.templates.wake_prompt(self.name)
        if gate.data["to_review"]:
            text += ("\n\nProposals waiting for your review:\n"
                     + json.dumps(gate.data["to_review"], ensure_ascii=False))
        rejected = gate.data["rejected"]
        if rejected:
            text += ("\n\nYour proposals that peers rejected, with their reasons (propose "
                     "one again, changed, to have it reviewed afresh):\n"
                     + json.dumps(rejected, ensure_ascii=False))
        # told once: a rejection opens the gate for the wake that shows it, not every wake
        state.mark(setup.home, TOLD, [r["round"] for r in rejected])
        return text

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        if ending.status in ("end_turn", "task_finished"):
            state.mark(setup.home, MARK, setup.number)
        return f"library {ending.status}"
