"""What a wake does once that it used to do again and again (issue 33: a wake's CPU).

The wake log's file is opened once a wake, not once an event; each context is rendered
once a wake while it is unchanged. Mechanics only: the bench (bench/wake_cycle.py) has
the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.config import paths
from citizen.config.settings import ModelPrice
from citizen.home import wakelog
from citizen.home.contexts import Context, ContextStore
from citizen.home.tasks import TaskQueue
from citizen.home.wakelog import WakeLog
from citizen.llm.base import Request, ToolSpec, estimate_tokens
from citizen.wake.flow import run_wake
from citizen.wake.meter import Meter
from tests.scripts import Actor, call, provides


def _task_wake() -> Path:
    TaskQueue(paths.home("opus").tasks).add("write the report")
    result = run_wake("opus", wake_type="TASK", provider=provides(Actor(
        call("task_progress", note="half"), call("task_complete", summary="done"))))
    assert result.status == "ok"
    return result.log_path


def test_a_wake_opens_its_log_once(civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []  # opened to write (evidence reads the log: not counted)
    real: Callable[..., int] = os.open

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR):
            opened.append(os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    log = _task_wake()
    events = wakelog.read(log)
    assert len(events) > 10 and events[-1]["event"] == "wake_end"
    assert opened.count(str(log)) == 1


def test_a_log_closed_takes_a_later_line_and_stays_whole(civ: Path) -> None:
    log = wakelog.WakeLog(paths.home("opus"), 3, "TASK")
    log.event("wake_start")
    log.close()
    log.event("after")  # appended on its own: nothing is lost after the close
    assert [e["event"] for e in wakelog.read(log.path)] == ["wake_start", "after"]


def test_a_context_is_rendered_once_a_wake_while_unchanged(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _task_wake()  # the first wake's orientation and new files out of the way
    cfg = config.load_citizen("opus")
    store = ContextStore(paths.home("opus").contexts, cfg.context_limits, estimate_tokens)
    contexts = store.load_all()
    for ctype in ("skills", "goals", "relationships", "dreams"):
        contexts[ctype].add(f"one {ctype} entry")  # small: each fits the prompt whole
    store.save_all(contexts)
    lines: Counter[str] = Counter()
    real = Context.line

    def spy(entry: dict[str, Any]) -> str:
        lines[str(entry["text"])] += 1  # each render of a context shows each entry once
        return real(entry)

    monkeypatch.setattr(Context, "line", staticmethod(spy))
    _task_wake()
    # Read by the contexts event, the prompt and the cap check at the save: one render.
    assert [lines[f"one {t} entry"] for t in ("skills", "goals", "relationships",
                                             "dreams")] == [1, 1, 1, 1]


def _request(system: list[str], text: str) -> Request:
    return Request(messages=[{"role": "user", "content": text}], system=system,
                   tools=[ToolSpec("note", "write a note", {"type": "object"})],
                   max_tokens=300, tier="primary", purpose="execute")


def test_the_worst_case_encodes_each_system_block_once_a_wake(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = "## history\n- the wake before: « ünïcode » and \"quotes\"\n" * 50
    system = ["You are opus.", block]
    meter = Meter(WakeLog(paths.home("opus"), 1, "TASK"), config.load_citizen("opus").budget)
    price = ModelPrice(input=3.0, output=15.0, cache_write=3.75, cache_read=0.3)
    encoded: list[Any] = []
    real = json.dumps

    def spy(value: Any, *args: Any, **kwargs: Any) -> str:
        if value is block or (isinstance(value, dict) and block in value.get("system", ())):
            encoded.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", spy)  # the module the meter encodes with
    worst = [meter.worst_case(_request(system, f"call {i}"), price) for i in range(3)]
    assert len(encoded) == 1, "the block is encoded for the first call only"
    monkeypatch.undo()
    for i, cost in enumerate(worst):  # the same figure as the whole request's estimate
        body = json.dumps(_request(system, f"call {i}").to_dict(), default=str)
        assert cost == (estimate_tokens(body) * 3.75 + 300 * 15.0) / 1e6


def test_a_metered_call_encodes_each_system_block_once_a_wake_digest_included(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from citizen.llm.base import Reply, Usage
    from citizen.llm.scripted import ScriptedProvider

    block = "## goals\n- ship « the report » with \"quotes\"\n" * 50
    system = ["You are opus.", block]
    log = WakeLog(paths.home("opus"), 1, "TASK")
    meter = Meter(log, config.load_citizen("opus").budget)
    llm = ScriptedProvider(default=Reply(text="answer", model="scripted", provider="scripted",
                                         usage=Usage(), cost_usd=0.0, latency_s=0.0))
    encoded: list[Any] = []
    real = json.dumps

    def spy(value: Any, *args: Any, **kwargs: Any) -> str:
        if value is block or (isinstance(value, dict) and block in value.get("system", ())) \
                or (isinstance(value, list) and block in value):
            encoded.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", spy)
    requests = [_request(system, f"call {i}") for i in range(3)]
    for request in requests:
        meter.call(llm, request)
    assert len(encoded) == 1, "the block is encoded for the first call only, digest too"
    monkeypatch.undo()
    log.close()
    # The logged digest is the request's own (what a replay compares), byte for byte the
    # whole request encoded with sorted keys.
    calls = [e for e in wakelog.read(log.path) if e["event"] == "llm_call"]
    for request, event in zip(requests, calls, strict=True):
        body = json.dumps(request.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
        assert event["request_digest"] == request.digest() \
            == hashlib.sha256(body.encode()).hexdigest()[:16]


def test_a_wake_that_knows_no_secret_logs_its_events_without_walking_them(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server's wake holds no secret: its events go to the log as they are. One that
    knows a secret still walks every event and keeps the secret out."""
    from citizen.config.secrets import SECRET_KEYS

    for key in SECRET_KEYS:
        monkeypatch.delenv(key, raising=False)
    walked: list[Any] = []
    real = wakelog._scrub

    def spy(value: Any, redact: Callable[[str], str]) -> Any:
        walked.append(value)
        return real(value, redact)

    monkeypatch.setattr(wakelog, "_scrub", spy)
    log = _task_wake()
    assert len(wakelog.read(log)) > 10 and walked == []
    secret = "sk-ant-not-to-be-logged-0123"  # noqa: S105 - a test's key
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    TaskQueue(paths.home("opus").tasks).add(f"quote {secret} back")
    result = run_wake("opus", wake_type="TASK", provider=provides(Actor(
        call("task_complete", summary="done"))))
    assert result.status == "ok" and walked
    text = result.log_path.read_text()
    assert secret not in text and "[ANTHROPIC_API_KEY redacted]" in text


def test_a_replys_record_is_asdicts_without_its_deep_copy() -> None:
    """Reply.to_dict is logged on every call: `asdict`'s copy of every tool input and of
    `data` was spent for nothing. Its record must stay asdict's, field for field, so a
    field added to Reply and not to the record fails here."""
    from dataclasses import asdict

    from citizen.llm.base import Reply, ToolCall, Usage

    reply = Reply("text", "m", "p", Usage(1, 2, 3, 4, 5), 0.5,
                  (ToolCall("i", "n", {"a": [1]}, "x"),), {"d": [1, {"e": 2}]}, "end", 1.5)
    assert reply.to_dict() == asdict(reply)
    assert list(reply.to_dict()) == list(asdict(reply))
    assert Reply.from_dict(reply.to_dict()) == reply
