"""A new citizen starts small (Experience v2 §Onboarding: "Start with minimal identity
context"): its identity is the default template with its name and focus - and, when a
citizen asked for it, who and why - and every other context, its tasks and its memory
start empty."""

from __future__ import annotations

import json
from pathlib import Path

from citizen import config
from citizen.admin import founding
from citizen.broker.newcomer import identity_of
from citizen.config import paths
from citizen.home.contexts import ORDER, ContextStore
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens


def contexts(name: str) -> dict[str, list[str]]:
    cfg = config.load_citizen(name)
    store = ContextStore(paths.home(name).contexts, cfg.context_limits, estimate_tokens)
    return {t: [e["text"] for e in c.entries] for t, c in store.load_all().items()}


def test_a_new_citizen_starts_with_a_minimal_identity_and_nothing_else(civ: Path) -> None:
    founding.init_citizen("nova", {"email": "nova@experience.local", "focus": "Research"})
    held = contexts("nova")
    assert set(held) == set(ORDER)
    assert held["identity"] == [config.templates().identity("nova", "Research")]
    assert "I am nova" in held["identity"][0] and "Research" in held["identity"][0]
    assert "I am new here" in held["identity"][0]  # the default template, not a founder's
    assert all(held[t] == [] for t in ORDER if t != "identity")
    home = paths.home("nova")
    assert set(TaskQueue(home.tasks).counts().values()) == {0}
    assert Memory(home.memory).search("citizen", 5) == []
    assert json.loads(home.config.read_text())["focus"] == "Research"


def test_a_requested_citizen_also_knows_who_asked_for_it_and_why(civ: Path) -> None:
    record = {"name": "nova", "focus": "Research", "author": "opus",
              "why": "nobody watches the papers"}
    founding.init_citizen("nova", {"email": "nova@experience.local", "focus": "Research"},
                          identity=identity_of(record))
    (identity,) = contexts("nova")["identity"]
    assert identity.startswith(config.templates().identity("nova", "Research"))
    assert "opus" in identity and "nobody watches the papers" in identity
