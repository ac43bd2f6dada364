"""REFLECT wakes: identity review and dream processing, when something happened to reflect on."""

from __future__ import annotations

from citizen import state
from citizen.tools.base import ToolEnv
from citizen.wakes.base import WORK_WAKES, Ending, Gate, Setup, WakeType

MARK = "reflected_through_wake"


class ReflectWake(WakeType):
    name = "REFLECT"

    def gate(self, setup: Setup) -> Gate:
        latest = setup.memory.latest_wake(WORK_WAKES)
        done = int(setup.marks.get(MARK, 0))
        if latest <= done:
            return Gate(False, f"nothing new since the reflection at wake {done}")
        return Gate(True, f"wakes up to {latest} happened since the last reflection",
                    {"through": latest})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        return setup.templates.wake_prompt(self.name)

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        if ending.status in ("end_turn", "task_finished"):
            state.mark(setup.home, MARK, setup.number)
            if ending.text:
                env.contexts["dreams"].add(ending.text[:1000])
        return f"reflection {ending.status}"
