"""The interface of a wake type: a deterministic gate, an instruction, and an ending."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from citizen.config import CitizenConfig, Templates
from citizen.memory import Memory
from citizen.paths import Home
from citizen.tasks import TaskQueue
from citizen.tools.base import ToolEnv

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
class Ending:
    """How the tool-use loop ended."""

    status: str  # end_turn, task_finished, budget, iterations, no_progress, provider_error
    reason: str = ""
    text: str = ""


class WakeType(ABC):
    """One kind of wake. Registered by name in `citizen.wakes`."""

    name: ClassVar[str]
    required_tools: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def gate(self, setup: Setup) -> Gate:
        """Decide, without any model call, whether this wake has work."""

    @abstractmethod
    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        """Prepare the work (e.g. claim the task) and return the instruction for the model."""

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        """Record the outcome (e.g. move the task); returns a one-line summary."""
        return ending.reason or ending.text[:200] or ending.status
