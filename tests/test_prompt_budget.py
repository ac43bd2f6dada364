"""Every call's prompt stays within its budget however full the contexts are, the prefix
is the same bytes on every call of a wake, and the tool loop's conversation is bounded.

The attack on the old code: six contexts filled to 90 % of the seed's caps made every
execute call and every vote carry ≈128k tokens - more than a wake's dollar budget."""

from __future__ import annotations

import json
from pathlib import Path

from citizen import config
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from citizen.tools.base import RESULT_CHARS
from citizen.wake.flow import run_wake
from tests.scripts import Actor, call

FULL = ("history", "goals", "relationships", "skills", "dreams", "peer_monitor")


def fill(name: str, share: float = 0.9) -> None:
    cfg = config.load_citizen(name)
    store = ContextStore(paths.home(name).contexts, cfg.context_limits, estimate_tokens)
    contexts = store.load_all()
    for ctype in FULL:
        ctx = contexts[ctype]
        n = 0
        while store.tokens(ctx) < share * ctx.cap:
            ctx.add(f"{ctype} note {n}: " + "something worth remembering " * 20)
            n += 1
        ctx.entries[-1]["text"] = f"the newest {ctype} note"
    store.save_all(contexts)


def tokens(blocks: object) -> int:
    return estimate_tokens("\n".join(blocks))  # type: ignore[arg-type]


def test_a_full_memory_does_not_ride_on_every_call(civ: Path) -> None:
    fill("opus")
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    actor = Actor(call("write_file", path="notes/a.md", content="a"),
                  call("read_file", path="notes/a.md"),
                  call("task_complete", summary="notes/a.md says a"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    budget = config.load_citizen("opus").budget
    executes = [r for r in actor.requests if r.purpose == "execute"]
    assert len(executes) == 3
    first = list(executes[0].system)
    assert tokens(first) <= budget.prompt_tokens_execute
    assert all(list(r.system) == first for r in executes)  # the cached prefix holds
    shown = "\n".join(first)
    assert "## identity" in shown and "You are opus" in shown
    assert "the newest goals note" in shown and "older entries not shown" in shown


def test_a_vote_carries_a_small_prompt(civ: Path) -> None:
    from citizen.llm.base import Reply, Request
    from citizen.wake.types.base import Ask

    fill("opus")
    seen: list[Request] = []

    def answer(request: Request) -> Reply:
        seen.append(request)
        return Reply(text="", model="m", provider="scripted", data={"ok": True})

    from citizen.home.wakelog import WakeLog
    from citizen.llm.scripted import ScriptedProvider
    from citizen.wake.meter import Meter
    from citizen.wake.prompt import system_blocks

    cfg = config.load_citizen("opus")
    store = ContextStore(paths.home("opus").contexts, cfg.context_limits, estimate_tokens)
    blocks, shown = system_blocks("You are opus.", store.load_all(),
                                  cfg.budget.prompt_tokens_step, "step", estimate_tokens)
    ask = Ask(ScriptedProvider(default=answer), Meter(WakeLog(paths.home("opus"), 1, "X"),
                                                      cfg.budget), blocks)
    ask("Vote.", {"type": "object"}, "vote")
    assert tokens(seen[0].system) <= cfg.budget.prompt_tokens_step
    assert "identity" in shown and "goals" in shown and "working" not in shown


def test_the_conversation_is_bounded(civ: Path) -> None:
    """A wake that reads a 40 KB file (8000 characters of it per result) six times:
    past the conversation budget the oldest results are dropped (the last four stay
    whole), and the wake carries on."""
    big = "x" * 40_000
    (civ / "opus" / "big.txt").write_text(big)
    data = json.loads(paths.home("opus").config.read_text())
    data["budget"] = {**data.get("budget", {}), "max_iterations": 14,
                      "conversation_tokens": 5000, "max_usd_per_wake": 1.0,
                      "max_output_tokens": 1024}
    paths.home("opus").config.write_text(json.dumps(data))
    TaskQueue(paths.home("opus").tasks).add("Read big.txt")
    steps = []
    for i in range(12):
        steps += [call("write_file", path="n.txt", content=str(i)),  # a change: no cache
                  call("read_file", path="big.txt")]
    actor = Actor(*steps[:13], call("task_complete", summary="read it"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    last = [r for r in actor.requests if r.purpose == "execute"][-1]
    body = json.dumps(list(last.messages))
    assert "dropped to keep the prompt within its budget" in body
    # what is left: the budget, plus the four newest results kept whole
    assert estimate_tokens(body) < 5000 + 4 * estimate_tokens("x" * RESULT_CHARS)
    kept = [b for m in last.messages if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"
            and big[:100] in str(b.get("content"))]
    assert 1 <= len(kept) <= 4


def test_the_memory_relevant_to_the_work_is_recalled(civ: Path) -> None:
    """History and memory enter by relevance too: the FTS5 search over the citizen's
    memory, for the words of the work, within the budget."""
    from citizen.home.memory import Memory

    mem = Memory(paths.home("opus").memory)
    mem.record(1, "TASK", "the lighthouse ledger lives in notes/lighthouse.csv")
    mem.record(2, "TASK", "tea was good today")
    TaskQueue(paths.home("opus").tasks).add("Add a row to the lighthouse ledger")
    actor = Actor(call("task_stuck", reason="just looking"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    system = "\n".join(next(r for r in actor.requests if r.purpose == "execute").system)
    assert "## recalled" in system and "[ledger] lives in notes/[lighthouse].csv" in system
    assert "tea was good" not in system


def test_every_call_of_a_wake_carries_the_philosophy_within_its_budget(civ: Path) -> None:
    """The seed's philosophy ("encoded in every citizen's identity") rides in the system
    block of every call, full memory or not, and the prompt stays within its budget."""
    fill("opus")
    TaskQueue(paths.home("opus").tasks).add("Write notes/a.md saying a")
    actor = Actor(call("write_file", path="notes/a.md", content="a"),
                  call("task_complete", summary="notes/a.md says a"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok", result.reason
    lines = [line for group in config.templates().philosophy.values() for line in group]
    assert len(lines) >= 9
    budget = config.load_citizen("opus").budget
    executes = [r for r in actor.requests if r.purpose == "execute"]
    assert len(executes) == 2
    for request in executes:  # the bookkeeping calls (select, route) carry no system
        assert all(line in request.system[0] for line in lines), request.system[0]
        assert tokens(request.system) <= budget.prompt_tokens_execute
