"""DRY_AUDIT wakes: hunt duplication and complexity in one's own code when it changed."""

from __future__ import annotations

from citizen.home import rollback, state
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending
from citizen.wake.types.base import Gate, Setup, WakeType

MARK = "dry_audited_commit"


class DryAuditWake(WakeType):
    name = "DRY_AUDIT"
    required_tools = ("dry_violation_report", "dry_violation_list", "read_file")

    def gate(self, setup: Setup) -> Gate:
        head = rollback.head(setup.home)
        if head is None:
            return Gate(False, "~/code is not a git repository: nothing to audit")
        if head == setup.marks.get(MARK):
            return Gate(False, f"code unchanged since the audit of {head[:12]}")
        return Gate(True, f"code at {head[:12]} not audited yet", {"head": head})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        return setup.templates.wake_prompt(self.name) + (
            f"\n\nYour code is in {setup.home.code} (commit {gate.data['head'][:12]}). "
            "Look first at what changed since the baseline (code_my_divergence).")

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        if ending.status in ("end_turn", "task_finished"):
            state.mark(setup.home, MARK, rollback.head(setup.home) or "")
        return f"DRY audit {ending.status}"
