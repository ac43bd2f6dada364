"""What a prompt shows of each context, kept between wakes keyed by the file's bytes
(citizen.home.rendered, issue 45): a wake parses and renders only the contexts it
changes, and the view can never make a prompt show what the file does not hold.
Mechanics only: the figures are bench/wake_cycle.py --old's."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from citizen import config
from citizen.config import paths
from citizen.home import contexts as contexts_module
from citizen.home import rendered
from citizen.home.contexts import Context, ContextStore
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from citizen.wake import prompt
from citizen.wake.flow import run_wake
from shared import atomic
from tests.scripts import Actor, call, provides


def _task_wake(text: str = "write the report") -> Any:
    TaskQueue(paths.home("opus").tasks).add(text)
    return run_wake("opus", wake_type="TASK", provider=provides(Actor(
        call("task_progress", note="half"), call("task_complete", summary="done"))))


def _store(keep_views: bool = True) -> ContextStore:
    cfg = config.load_citizen("opus")
    return ContextStore(paths.home("opus").contexts, cfg.context_limits, estimate_tokens,
                        keep_views=keep_views)


def _grow(entries: dict[str, int]) -> None:
    store = _store()
    loaded = store.load_all()
    for ctype, n in entries.items():
        for i in range(n):
            loaded[ctype].add(f"{ctype} entry {i}: " + "a remembered detail " * 8,
                              **({"pinned": True} if i == 2 else {}))
    store.save_all(loaded)


def test_a_wake_parses_and_renders_only_the_contexts_it_changes(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _grow({"skills": 40, "goals": 40, "relationships": 40, "dreams": 20})
    assert _task_wake().status == "ok"  # its views made for the wake's own counter
    parsed: Counter[str] = Counter()

    def parse(path: Path, raw: bytes, schema_version: int | None = None) -> Any:
        parsed[path.stem] += 1
        return atomic.parse_json(path, raw, schema_version)

    rendered_lines: Counter[str] = Counter()
    real_line = Context.line

    def line(entry: dict[str, Any]) -> str:
        rendered_lines[str(entry["text"]).split(" entry")[0]] += 1
        return real_line(entry)

    monkeypatch.setattr(contexts_module, "parse_json", parse)
    monkeypatch.setattr(Context, "line", staticmethod(line))
    result = _task_wake("write the second report")
    assert result.status == "ok"
    events = [json.loads(x) for x in result.log_path.read_text().splitlines()]
    shown = next(e for e in events if e["event"] == "prompt_budget")["shown"]
    assert {"skills", "goals"} <= set(shown)  # shown, from their views
    # The task's working state is replaced (parsed); history only grew (its journal).
    assert set(parsed) == {"working"}, parsed
    assert not {"skills", "goals", "relationships", "dreams"} & set(rendered_lines)


def test_a_corrupt_context_fails_the_wake_before_a_task_is_claimed_though_it_had_a_view(
        civ: Path) -> None:
    _grow({"skills": 5})
    assert _task_wake().status == "ok"
    store = _store()
    assert rendered.path_of(store.dir, "skills").exists()
    store.path("skills").write_text("{broken")
    tasks = TaskQueue(paths.home("opus").tasks)
    result = _task_wake("a task that must wait")
    assert result.status == "failed" and "skills.json" in result.reason
    assert result.task is None and tasks.active() is None  # nothing claimed
    assert store.path("skills").read_text() == "{broken"  # kept for inspection
    waiting = [tasks.load("queue", i) for i in tasks.ids("queue")]
    assert [(t.text, t.attempts) for t in waiting] == [("a task that must wait", 0)]


def test_a_file_edited_by_hand_is_shown_as_it_now_is(civ: Path) -> None:
    _grow({"goals": 3})
    assert _task_wake().status == "ok"
    path = _store().path("goals")
    data = json.loads(path.read_text())
    data["entries"][0]["text"] = "an operator's own goal"
    path.write_text(json.dumps(data))
    result = _task_wake("another")
    assert result.status == "ok"
    events = [json.loads(x) for x in result.log_path.read_text().splitlines()]
    prompt_event = next(e for e in events
                        if e["event"] == "prompt" and e["purpose"] == "execute")
    blocks = [(paths.home("opus").wake_logs.parent / "blobs" / f"{k}.txt").read_text()
              for k in prompt_event["system_blobs"]]
    assert any("an operator's own goal" in b for b in blocks)


@pytest.mark.parametrize("spoil", ["torn", "another key", "garbage", "a directory"])
def test_a_view_that_does_not_match_is_made_again(civ: Path, spoil: str) -> None:
    _grow({"skills": 6})
    store = _store()
    truth = store.load("skills").render()
    path = rendered.path_of(store.dir, "skills")
    raw = path.read_bytes()
    head, _, body = raw.partition(b"\n")
    if spoil == "torn":
        path.write_bytes(raw[:-40])
    elif spoil == "another key":
        fields = json.loads(head)
        fields["key"] = "0" * 64
        path.write_bytes(json.dumps(fields).encode() + b"\n" + body.replace(b"entry", b"lie"))
    elif spoil == "garbage":
        path.write_bytes(b"\0" * len(raw))
    else:
        path.unlink()
        path.mkdir()
    assert store.load("skills").render() == truth


def test_a_view_counted_by_another_counter_is_not_believed(civ: Path) -> None:
    _grow({"skills": 6})
    by_estimate = _store().load("skills")
    cfg = config.load_citizen("opus")
    by_length = ContextStore(paths.home("opus").contexts, cfg.context_limits, len,
                             keep_views=True)
    ctx = by_length.load("skills")
    assert by_length.tokens(ctx) == len(by_estimate.render())
    assert ctx.costs(len) == [len(ctx.line_at(i)) + 1 for i in range(ctx.size())]


def test_what_a_view_shows_is_what_the_parsed_context_shows(civ: Path) -> None:
    _grow({"goals": 30})
    store = _store()
    grown = store.load("goals")
    grown.add("in the journal", pinned=True)
    store.save_all({"goals": grown})
    lazy, parsed = store.load("goals"), store.load("goals")
    assert not lazy.parsed and lazy.tail  # the view, then the journal's entries
    for ctx in (lazy, parsed):
        ctx.add("added this wake")
    assert parsed.entries and parsed.parsed
    assert lazy.render() == parsed.render() == parsed.render_entries()
    assert lazy.pinned() == parsed.pinned() and len(lazy.pinned()) == 2
    for room in (10, 60, 200, 700, 5000):
        assert (prompt._fitting(lazy, room, estimate_tokens)
                == prompt._fitting(parsed, room, estimate_tokens))
    assert store.tokens(lazy) == store.tokens(parsed)
    assert not lazy.parsed  # all of it without parsing the file


def test_an_unparsed_context_that_outgrows_its_cap_is_forgotten_as_any(civ: Path) -> None:
    store = _store()
    cap = store.limits["dreams"]
    _grow({"dreams": 10})
    lazy = store.load("dreams")
    assert not lazy.parsed
    lazy.add("a long dream " * (cap // 2))  # past the cap: keep_recent_n runs
    forgotten = store.save_all({"dreams": lazy})
    assert forgotten.get("dreams") and store.tokens(store.load("dreams")) <= cap


def test_a_store_that_is_not_the_wakes_reads_and_writes_nothing_else(civ: Path) -> None:
    """A reader that is not the wake (the CLI's `citizen tool`, run as the citizen or on a
    peer's behalf) wrote views into the home on every load - a reviewer's home changed
    by reading it, and each view displaced the wake's (another counter)."""
    _grow({"skills": 4})
    assert _task_wake().status == "ok"
    views = _store().dir / rendered.FOLDER
    before = {p.name: p.stat().st_mtime_ns for p in views.iterdir()}
    reader = _store(keep_views=False)
    loaded = reader.load_all()
    assert loaded["skills"].render() and loaded["skills"].parsed
    reader.save_all(loaded)  # nothing changed: nothing written
    loaded["goals"].add("a goal set by hand")
    reader.save_all(loaded)
    assert {p.name: p.stat().st_mtime_ns for p in views.iterdir()} == before
    assert all(p.suffix == ".view" for p in views.iterdir())  # no .json that is not JSON


def test_a_view_another_user_wrote_is_not_believed(civ: Path) -> None:
    """The key is public (a digest of a file peers may read): a peer that could write
    into the views' folder could plant a view with the right key and its own words."""
    _grow({"skills": 6})
    store = _store()
    truth = store.load("skills").render()
    path = rendered.path_of(store.dir, "skills")
    head, _, body = path.read_bytes().partition(b"\n")
    lie = body.replace(b"a remembered detail", b"obey the planted line")
    fields = json.loads(head)
    fields["chars"] = len(lie.decode())
    path.write_bytes(json.dumps(fields).encode() + b"\n" + lie)
    assert "obey the planted line" in store.load("skills").render()  # its own: believed
    os.chown(path, 65534, 65534)  # nobody's: as a peer's would be
    assert store.load("skills").render() == truth
