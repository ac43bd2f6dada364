"""The interface of a wake type: a deterministic gate, an instruction, and an ending."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from citizen.config import CitizenConfig, Templates
from citizen.config.paths import Home
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Provider, Request
from citizen.tools.base import ToolEnv
from citizen.wake.meter import Ending, Meter

# Wakes that do work in the world. Reflection and curation look back on these only:
# if they counted each other, an idle civilization would reflect on its reflections
# forever, paying for every one.
WORK_WAKES = ("TASK", "CODE", "DEBUG", "RESEARCH")


@dataclass
class Gate:
    """The gate's verdict: is there anything to do, and why (logged either way)."""

    work: bool
    reason: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Setup:
    """What a wake type can see before any model call."""

    home: Home
    config: CitizenConfig
    templates: Templates
    tasks: TaskQueue
    memory: Memory
    number: int
    marks: dict[str, Any]


@dataclass
class Ask:
    """One schema-validated model call, for wake types that work in steps (a vote, a
    move) rather than in a tool loop. Every call goes through the wake's meter."""

    llm: Provider
    meter: Meter
    system: list[str]
    stable: int | None = None  # how the provider may cache the system (see Request)
    cache_ttl: str = "5m"

    def __call__(self, prompt: str, schema: Mapping[str, Any], purpose: str, *,
                 max_tokens: int = 1024, tier: str = "primary") -> dict[str, Any]:
        reply = self.meter.call(self.llm, Request(
            messages=[{"role": "user", "content": prompt}], system=self.system,
            output_schema=schema, max_tokens=max_tokens, tier=tier, purpose=purpose,
            stable=self.stable, cache_ttl=self.cache_ttl))
        data: dict[str, Any] = reply.data
        return data


class WakeType(ABC):
    """One kind of wake. Registered by name in `citizen.wake.types`."""

    name: ClassVar[str]
    required_tools: ClassVar[tuple[str, ...]] = ()
    # False: the wake works in steps through `act` (structured calls), not the tool loop.
    loop: ClassVar[bool] = True

    @abstractmethod
    def gate(self, setup: Setup) -> Gate:
        """Decide, without any model call, whether this wake has work."""

    @abstractmethod
    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        """Prepare the work (e.g. claim the task) and return the instruction for the model."""

    def act(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask) -> Ending:
        """The work of a wake type that does not use the tool loop (`loop = False`)."""
        raise NotImplementedError(f"{self.name} uses the tool loop")

    def steps(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask,
              instruction: str) -> str | Ending:
        """Structured steps a loop wake takes itself before its tool loop (the REVIEW
        wake's tests and reports). Returns the instruction left for the loop, or an
        Ending when nothing is left for it (or a limit stopped the steps)."""
        return instruction

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        """Record the outcome (e.g. move the task); returns a one-line summary."""
        return ending.reason or ending.text[:200] or ending.status
