"""Owed-steps wakes: take the steps this citizen owes in threads of the commons.

CONSENSUS (proposal steps) and DEBATE (moves) are the same wake with different
hooks: a deterministic gate (the threads and the task queue, no model - nothing owed
is an idle, free wake), an optional task that opens a thread, then up to N steps,
each taken by a hook; a step that fails is counted per thread and turn, and at the
Nth failure the hook's fallback takes the step instead (a proposer withdraws, a
debater passes) so that a thread never waits forever on a model that cannot do it.
After each step the next owner's doorbell rings, so a thread moves at conversation
speed; at the end, requesters are mailed what they asked to hear.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from citizen import civilization
from citizen.errors import ProviderError, StructuredOutputError
from citizen.home import state
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending
from citizen.wake.types.base import Ask, Gate, Setup, WakeType
from citizen.wake.types.task import finish_task
from shared.errors import SharedError


class Thread(Protocol):
    """A thread's derived state (a Proposal, a Debate): all the wake needs is its id."""

    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=Thread)


class Store(Protocol[T]):
    """A protocol's threads in the commons (Consensus, Debates)."""

    def owed(self, citizen: str) -> list[T]: ...


@dataclass(frozen=True)
class Spec:
    """The numbers and names of one owed-steps wake."""

    max_steps: int  # steps one wake may take (several threads can wait at once)
    max_failures: int  # failures of one step before its fallback
    failures_mark: str  # the mark counting failures per step
    event: str  # the wake-log event of a step ("consensus_step", "debate_move")
    idle: str  # the gate's reason when nothing is owed
    notices: str  # what a requester is mailed ("requester notices", "cruxes to mail")


class OwedStepsWake(WakeType, Generic[T]):
    """A wake that takes the steps owed in one protocol's threads (see the module doc)."""

    loop = False
    spec: ClassVar[Spec]

    # ------------------------------------------------------------ hooks

    @abstractmethod
    def store(self, setup: Setup) -> Store[T]:
        """Where this wake's threads live."""

    @abstractmethod
    def take(self, setup: Setup, env: ToolEnv, ask: Ask, item: T) -> T:
        """Take the owed step of `item`; returns the thread after it."""

    @abstractmethod
    def failure_key(self, item: T) -> str:
        """Names the step (thread and turn), so failures are counted per step."""

    @abstractmethod
    def fallback(self, setup: Setup, item: T, why: str) -> T | None:
        """Take the step without the model, once it failed too often (None: cannot)."""

    @abstractmethod
    def step_data(self, item: T, after: T) -> dict[str, Any]:
        """What the wake log records of a step (and the text of the wake's summary)."""

    @abstractmethod
    def rings(self, setup: Setup, after: T) -> list[tuple[str, str]]:
        """Whom to wake after a step, with the reason: (citizen, reason)."""

    @abstractmethod
    def from_task(self, setup: Setup, env: ToolEnv) -> str:
        """Act on the claimed task (open a thread, record a decision); returns its result."""

    @abstractmethod
    def owed_text(self, owed: list[T]) -> str:
        """The gate's reason for the steps owed ("2 proposal steps owed")."""

    def notices_due(self, setup: Setup) -> int:
        """How many requesters are owed a mail now."""
        return 0

    def send_notices(self, setup: Setup, env: ToolEnv) -> None:
        """Mail requesters what they asked to hear (a decision, a crux)."""

    # ------------------------------------------------------------ the wake

    def gate(self, setup: Setup) -> Gate:
        task_id = setup.tasks.next_of(self.name)
        owed = self.store(setup).owed(setup.home.name)
        notices = self.notices_due(setup)
        if not (owed or task_id or notices):
            return Gate(False, self.spec.idle)
        parts = [self.owed_text(owed)] if owed else []
        parts += [f"{self.name.lower()} task {task_id}"] if task_id else []
        parts += [f"{notices} {self.spec.notices}"] if notices else []
        return Gate(True, "; ".join(parts), {"task_id": task_id})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        if gate.data.get("task_id"):
            env.task = setup.tasks.claim(gate.data["task_id"])
        return f"take the {self.name} steps I owe"

    def act(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask) -> Ending:
        me = setup.home.name
        done: list[str] = []
        if env.task is not None:
            env.task_outcome = ("done", self.from_task(setup, env))
            done.append(env.task_outcome[1])
        spec = self.spec
        for _ in range(spec.max_steps):
            owed = self.store(setup).owed(me)
            if not owed:
                break
            item = owed[0]
            tid = item.id
            try:
                after = self.take(setup, env, ask, item)
            except (ProviderError, StructuredOutputError, SharedError) as exc:
                # the model failed, its answer broke the schema, or a rule refused it
                why = f"{tid}: {type(exc).__name__}: {exc}"[:500]
                env.event(f"{spec.event}_failed", thread=tid, reason=why)
                fallback = self._after_failure(setup, item, why)
                if fallback is None:
                    status = "end_turn" if isinstance(exc, SharedError) else "provider_error"
                    return Ending(status, why, "; ".join(done))
                after = fallback
                env.event(f"{spec.event}_fallback", thread=tid)
            data = self.step_data(item, after)
            done.append(f"{tid}: {data.get('summary', '')}")
            env.event(spec.event, thread=tid, **data)
            commons = civilization.commons(setup.templates)
            for who, reason in self.rings(setup, after):
                if who != me:
                    commons.ring(who, self.name, reason, sender=me)
        self.send_notices(setup, env)
        return Ending("end_turn", text="; ".join(done) or "nothing was owed any more")

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        if env.task is not None:
            status, result = env.task_outcome or ("failed", ending.reason or ending.status)
            finish_task(setup, env, env.task, status, result)
        return (ending.text or ending.reason or ending.status)[:300]

    def _after_failure(self, setup: Setup, item: T, why: str) -> T | None:
        """Count a failed step; at the max_failures-th, its fallback (None: try again at
        the next wake, or the fallback cannot take this step)."""
        key, mark = self.failure_key(item), self.spec.failures_mark
        failures = dict(setup.marks.get(mark, {}))
        failures[key] = int(failures.get(key, 0)) + 1
        setup.marks[mark] = failures
        state.mark(setup.home, mark, failures)
        if failures[key] < self.spec.max_failures:
            return None
        return self.fallback(setup, item, f"failed {failures[key]} times; last: {why}")
