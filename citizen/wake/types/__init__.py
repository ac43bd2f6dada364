"""The kinds of wake, registered by name: one module a kind, each a `WakeType` with a
gate (is there anything to do? - from files alone, before any model call) and a setup
(its prompt and tools). A new kind is a module here, registered below, a prompt in
`templates/wake_prompts.json` and, if it has a slot, a line in `wake_allocations.json`."""

from __future__ import annotations

from citizen.wake.meter import Ending
from citizen.wake.types.base import Ask, Gate, Setup, WakeType
from citizen.wake.types.consensus import ConsensusWake
from citizen.wake.types.debate import DebateWake
from citizen.wake.types.dry_audit import DryAuditWake
from citizen.wake.types.library import LibraryWake
from citizen.wake.types.peer_monitor import PeerMonitorWake
from citizen.wake.types.reflect import ReflectWake
from citizen.wake.types.review import ReviewWake
from citizen.wake.types.stream import StreamWake
from citizen.wake.types.task import CodeWake, DebugWake, ResearchWake, TaskWake

__all__ = ["Ask", "Ending", "Gate", "Setup", "WakeType", "get", "register", "registered"]

_REGISTRY: dict[str, type[WakeType]] = {}


def register(cls: type[WakeType]) -> type[WakeType]:
    """Register a wake type under its name."""
    _REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> WakeType | None:
    """A fresh instance of the wake type called `name`, or None when none is registered."""
    cls = _REGISTRY.get(name)
    return cls() if cls else None


def registered() -> list[str]:
    return sorted(_REGISTRY)


for _cls in (TaskWake, CodeWake, DebugWake, ResearchWake, ReflectWake, LibraryWake,
             PeerMonitorWake, DryAuditWake, ConsensusWake, DebateWake, StreamWake, ReviewWake):
    register(_cls)
