"""A hostile citizen attacks what issue 30 added: the REVIEW gate, the closing of changes,
Thought World's new records and ThoughtStream's ratings. Each test is one attack; each
failed on the code before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from citizen import civilization
from citizen.wake.types.review import ITEMS_PER_AUTHOR, WAKES_PER_AUTHOR_PER_DAY
from tests.scripts import Actor, say
from tests.test_evolution import evo  # noqa: F401 - evo: the fixture
from tests.test_evolution_loop import review


@pytest.mark.usefixtures("evo")
def test_a_flood_of_dry_violations_naming_a_peers_code_buys_few_of_its_wakes(
        civ: Path) -> None:
    """opus files forty DRY violations in aria's ~/code: each would open aria's paid
    REVIEW gate three times (fifteen wakes a day, every day, at opus's word). A peer's
    items open the gate on at most WAKES_PER_AUTHOR_PER_DAY wakes a day, and a wake
    names at most ITEMS_PER_AUTHOR of one author's items."""
    dry = civilization.commons().dry
    for n in range(40):
        dry.report("opus", f"{civ / 'aria' / 'code'}/app.py:{n}", f"dup {n}", "merge them")
    ran = 0
    for _ in range(20):
        agent = Actor(say("later"))
        if review("aria", agent).status != "ok":
            break
        ran += 1
        prompt = str(agent.requests[-1].messages[0]["content"])
        assert prompt.count("- DRY violation") <= ITEMS_PER_AUTHOR
    assert ran == WAKES_PER_AUTHOR_PER_DAY
    # Another peer's item still opens the gate the same day: the cap is opus's alone.
    dry.report("mira", f"{civ / 'aria' / 'code'}/app.py:99", "mira saw one", "fix it")
    agent = Actor(say("later"))
    assert review("aria", agent).status == "ok"
    prompt = str(agent.requests[-1].messages[0]["content"])
    assert "mira saw one" in prompt and "dup " not in prompt
