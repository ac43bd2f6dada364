"""REFLECT wakes: identity review and dream processing, when something happened to reflect on."""

from __future__ import annotations

from typing import Any

from citizen import civilization
from citizen.home import state
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending
from citizen.wake.types.base import WORK_WAKES, Gate, Setup, WakeType
from shared.records import AUTHOR

MARK = "reflected_through_wake"
SEEN = "peer_reports_seen"
# Why: any citizen files as many and as long reports as it likes - the prompt shows the
# latest few, clipped, or a flood would keep it over budget and the peer never reflects.
SHOWN_REPORTS, SHOWN_FINDINGS, DETAIL_CHARS = 10, 5, 300


def _reports_about(setup: Setup) -> list[dict[str, Any]]:
    return civilization.commons(setup.templates).monitor.about(setup.home.name)


class ReflectWake(WakeType):
    name = "REFLECT"

    def gate(self, setup: Setup) -> Gate:
        latest = setup.memory.latest_wake(WORK_WAKES)
        done = int(setup.marks.get(MARK, 0))
        reports = _reports_about(setup)[int(setup.marks.get(SEEN, 0)):]
        if latest <= done and not reports:
            return Gate(False, f"nothing new since the reflection at wake {done}")
        why = (f"wakes up to {latest} happened since the last reflection" if latest > done
               else f"{len(reports)} new peer reports about me")
        return Gate(True, why, {"through": latest, "reports": reports})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        text = setup.templates.wake_prompt(self.name)
        reports = gate.data["reports"]
        if len(reports) > SHOWN_REPORTS:
            text += f"\n\n({len(reports) - SHOWN_REPORTS} earlier peer reports not shown.)"
        for report in reports[-SHOWN_REPORTS:]:
            found = report["findings"]
            text += (f"\n\nA peer, {report[AUTHOR]}, reported about you: "
                     + "; ".join(f"{f['kind'][:40]}: {f['detail'][:DETAIL_CHARS]}"
                                 for f in found[:SHOWN_FINDINGS])
                     + (f" (and {len(found) - SHOWN_FINDINGS} more)"
                        if len(found) > SHOWN_FINDINGS else ""))
        return text

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        if ending.status in ("end_turn", "task_finished"):
            state.mark(setup.home, MARK, setup.number)
            state.mark(setup.home, SEEN, len(_reports_about(setup)))
            if ending.text:
                env.contexts["dreams"].add(ending.text[:1000])
        return f"reflection {ending.status}"
