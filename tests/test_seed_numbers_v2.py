"""The numbers of the Experience v2 seed (003), each held by value.

Each test pins one number (or precise rule) of the seed that no other test held by its
value: a test that compares the code with its own constant, or runs it with an override,
would pass whatever the number became. The docstring names the seed line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.home.wakelog import WakeLog
from citizen.llm.base import CHARS_PER_TOKEN, FREE, Request, estimate_tokens
from citizen.llm.scripted import ScriptedProvider
from citizen.tools import core_tools
from citizen.wake.flow import run_wake
from citizen.wake.meter import BudgetExceeded, Meter
from tests.scripts import Actor, call, queue, say

# Experience v2, Context System (L61-70): each type's cap in tokens.
SEED_CAPS = {"identity": 10_000, "history": 50_000, "goals": 20_000, "relationships": 15_000,
             "skills": 30_000, "dreams": 15_000, "working": 64_000, "peer_monitor": 10_000}
# Experience v2, Mandatory Wakes (L84-89): slot (wake number mod 10) -> wake type.
SEED_MANDATORY = {0: "REFLECT", 1: "LIBRARY", 4: "DRY_AUDIT", 7: "PEER_MONITOR"}


def never(*_: object) -> Actor:
    raise AssertionError("an idle wake must not even build a provider")


def test_every_shipped_citizen_has_the_seeds_context_caps() -> None:
    """003 L61-70: caps 10k/50k/20k/15k/30k/15k/64k/10k for every citizen, not only opus."""
    tpl = config.templates()
    for name in tpl.citizen_names():
        assert dict(tpl.citizen(name).context_limits) == SEED_CAPS, name


@pytest.mark.parametrize(("ctype", "n"), [("dreams", 30), ("peer_monitor", 15)])
def test_keep_recent_n_keeps_exactly_n(tmp_path: Path, ctype: str, n: int) -> None:
    """003 L68, L70: keep_recent_n keeps the newest 30 dreams / 15 peer_monitor entries."""
    cap = SEED_CAPS[ctype]
    store = ContextStore(tmp_path / "contexts", dict(config.templates().citizen(
        "opus").context_limits), estimate_tokens)
    ctx = store.load(ctype)
    size = int((cap - 50) * CHARS_PER_TOKEN / n) - 12  # n such entries fit, n + 1 do not
    for i in range(n + 1):
        ctx.add(f"E{i:03d} " + "x" * size)
    assert store.tokens(ctx) > cap
    probe = store.load(ctype)
    probe.entries = [dict(e) for e in ctx.entries[1:]]
    assert store.tokens(probe) <= cap  # precondition: n entries fit
    assert store.forget(ctx) == ["1:keep_recent_n"]  # the strategy alone is enough
    assert len(ctx.entries) == n
    assert ctx.entries[0]["text"].startswith("E001 ")  # the oldest one went


def test_the_mandatory_slots_are_the_seeds_and_forty_percent() -> None:
    """003 L82-93: 0 REFLECT, 1 LIBRARY, 4 DRY_AUDIT, 7 PEER_MONITOR (40 %); 2,3,5,6,8,9 own."""
    assert config.MANDATORY_SLOTS == SEED_MANDATORY
    assert config.OWN_SLOTS == (2, 3, 5, 6, 8, 9)
    tpl = config.templates()
    for name in tpl.citizen_names():
        slots = tpl.wake_slots(name)
        assert sorted(slots) == list(range(10)), name
        assert {s: slots[s] for s in (0, 1, 4, 7)} == SEED_MANDATORY, name
        mandatory = [s for s, kind in slots.items() if kind in SEED_MANDATORY.values()]
        assert len(mandatory) / len(slots) == 0.4, name


def test_dry_audit_and_peer_monitor_are_every_tenth_scheduled_wake(civ: Path) -> None:
    """003 L51, L213: DRY_AUDIT is 10 % of wakes and PEER_MONITOR every 10th wake (slot mod 10)."""
    types = [run_wake("opus", provider=never).wake_type for _ in range(20)]
    for start in (0, 10):
        cycle = types[start:start + 10]
        assert {s: cycle[s] for s in SEED_MANDATORY} == SEED_MANDATORY
        assert cycle.count("DRY_AUDIT") == 1 and cycle.count("PEER_MONITOR") == 1
    assert [i for i, t in enumerate(types) if t == "PEER_MONITOR"] == [7, 17]
    assert [i for i, t in enumerate(types) if t == "DRY_AUDIT"] == [4, 14]


def test_the_shipped_wake_budget_is_one_dollar_at_the_boundary(civ: Path) -> None:
    """003 L196: $1.00 max per wake - a call is made with $1.00 spent, refused past it."""
    cfg = config.load_citizen("opus")  # the shipped budget, no override
    meter = Meter(WakeLog(paths.home("opus"), 1, "TASK"), cfg.budget)
    llm = ScriptedProvider(default=say("ok"), price=FREE)  # worst case of a call: $0
    request = Request(messages=[{"role": "user", "content": "hi"}], max_tokens=16,
                      purpose="probe")
    meter.spent = 0.999999
    assert meter.call(llm, request).text == "ok"
    meter.spent = 1.0
    assert meter.call(llm, request).text == "ok"  # at the cap: still within it
    meter.spent = 1.000001
    with pytest.raises(BudgetExceeded, match=r"\$1\.00 wake budget"):
        meter.call(llm, request)


def test_the_shipped_iteration_cap_fails_the_task_at_25(civ: Path) -> None:
    """003 L197: auto-fail at 25 iterations - the 25th work call is the last, the task fails."""
    queue().add("endless")
    actor = Actor(*[call("task_progress", note=f"step {i}") for i in range(40)])
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "iterations"
    assert actor.purposes().count("execute") == 25
    (failed,) = queue().ids("failed")
    assert "hit the iteration cap" in queue().load("failed", failed).result


def test_the_initial_citizens_and_their_focus() -> None:
    """003 L223-227: opus Architecture, mira Systems, aria Creativity, with the seed's strengths."""
    tpl = config.templates()
    got = {n: (tpl.citizen(n).focus, tuple(tpl.citizen(n).strengths))
           for n in tpl.citizen_names()}
    assert got == {"opus": ("Architecture", ("design", "deep thinking", "code")),
                   "mira": ("Systems", ("debug", "audit", "tooling")),
                   "aria": ("Creativity", ("design", "research", "docs"))}


def test_the_seeds_named_tools_are_registered() -> None:
    """003 L124-133, L159-167: the eight code_* tools and the core tools the seed names exist."""
    names = set(core_tools(mail=True, code=True, search=True))
    seed = {"code_announce", "code_report_outcome", "code_pending_reviews", "code_verified_good",
            "code_list_changes", "code_adopt", "code_my_divergence", "code_status",
            "shell_command", "read_file", "write_file", "str_replace_file", "send_email",
            "check_email", "web_search", "web_fetch", "task_complete", "task_stuck",
            "task_progress", "library_list", "library_load", "library_propose",
            "dry_violation_report", "dry_violation_list", "dry_violation_fixed"}
    assert seed <= names, sorted(seed - names)
