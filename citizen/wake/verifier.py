"""A second opinion on "done", from someone other than the worker (the Thought World
seed: no self-evaluation).

When a task is taken, the same fast-tier role lists what the task names as its
deliverables - files, commands that must succeed, whether an answer is asked for - so
the bar is set before the work and kept in the task (`citizen.tools.evidence.deliverables`
keeps only what the task's own text says).

When a task's deliverables pass the mechanical check (`citizen.tools.evidence`), a fast-tier
call in a verifier's role - with none of the worker's conversation, only the task, the
worker's summary and what the files now hold - says pass or fail. A fail goes back to
the worker as the reason its claim was refused. If the verifier cannot be asked (the
model is down, a limit is reached, its answer is an error), there is no verdict: the
task stays open and the claim is judged again when it continues - never "done
(unverified)".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citizen.config import Templates
from citizen.errors import CitizenError, ProviderError, StructuredOutputError
from citizen.home.spend import DailyCapReached
from citizen.llm.base import Provider, Request
from citizen.wake.meter import BudgetExceeded, Meter

HEAD_CHARS = 1500  # of each deliverable file, shown to the verifier

# (task text, summary, evidence lines, deliverable files) -> (verdict, reason)
Verify = Callable[[str, str, list[str], list[Path]], tuple[str, str]]


@dataclass
class Verifier:
    llm: Provider
    meter: Meter
    templates: Templates
    redact: Callable[[str], str] = str

    def __call__(self, task: str, summary: str, evidence: list[str],
                 files: list[Path]) -> tuple[str, str]:
        """("pass" | "fail" | "unverified" (the model is down) | "refused" (a limit), why)."""
        shown = [*evidence]
        for f in files:
            try:
                head = f.read_text(errors="replace")[:HEAD_CHARS]
            except OSError as exc:
                head = f"(unreadable: {exc.strerror})"
            shown.append(f"--- {f.name} ---\n{self.redact(head)}")
        prompt = self.templates.prompt(
            "task_verify", task=task[:3000], summary=self.redact(summary[:2000]),
            evidence="\n".join(shown) or "(the task names no file)")
        request = Request(messages=[{"role": "user", "content": prompt}],
                          output_schema=self.templates.schema("task_verdict"), max_tokens=200,
                          tier="fast", purpose="verify_task")
        for attempt in range(2):
            try:
                reply = self.meter.call(self.llm, request)
                return str(reply.data["verdict"]), str(reply.data.get("reason", ""))[:300]
            except (BudgetExceeded, DailyCapReached) as exc:
                # A limit is no verdict: "done" waits (a worker whose claim lands on its
                # last allowed call must not skip the second opinion).
                return "refused", str(exc)[:200]
            except StructuredOutputError as exc:
                # The worker's files are in the verifier's prompt: an answer that cannot
                # be read may be an injection, and is never a pass.
                if attempt == 1:
                    return "fail", f"the verifier's answer could not be read ({exc.problem[:120]})"
            except (ProviderError, CitizenError) as exc:  # the model is down: say so
                return "unverified", f"no second opinion ({str(exc)[:160]})"
        return "fail", "unreachable"

    def extract(self, task: str) -> dict[str, Any] | None:
        """The task's deliverables as the model reads them; None if it cannot be asked
        (the rule in citizen.tools.evidence then stands alone)."""
        prompt = self.templates.prompt("task_deliverables", task=task[:3000])
        try:
            reply = self.meter.call(self.llm, Request(
                messages=[{"role": "user", "content": prompt}],
                output_schema=self.templates.schema("task_deliverables"), max_tokens=300,
                tier="fast", purpose="task_deliverables"))
        except (ProviderError, StructuredOutputError, CitizenError):
            return None  # read again at the next claim or at task_complete
        return dict(reply.data) if isinstance(reply.data, dict) else None
