"""Contexts: caps, forget strategies, the 4-level fallback, and saving only what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from citizen.config import templates
from citizen.home.contexts import JOURNAL_LINES, ORDER, STRATEGIES, Context, ContextStore
from citizen.llm.base import CHARS_PER_TOKEN, estimate_tokens
from shared.atomic import CorruptFile


@pytest.fixture
def store(tmp_path: Path) -> ContextStore:
    limits = dict(templates().citizen("opus").context_limits)
    s = ContextStore(tmp_path / "contexts", limits, estimate_tokens)
    s.init("I am opus.")
    return s


def fill(store: ContextStore, ctype: str, n: int, size: int = 400) -> None:
    ctx = store.load(ctype)
    for i in range(n):
        ctx.add(f"Entry {i}. " + "word " * (size // 5), status="completed" if i % 2 else "open")
    store.save_all({ctype: ctx})


def test_the_seed_table_of_types_and_strategies() -> None:
    assert set(ORDER) == set(STRATEGIES) and len(ORDER) == 8
    assert STRATEGIES == {
        "identity": ("never", 0),
        "history": ("compress_oldest", 0),
        "goals": ("archive_completed", 0),
        # the seed's "compress": the same forgetting as compress_oldest, one code path
        "relationships": ("compress_oldest", 0),
        "skills": ("compress_oldest", 0),
        "dreams": ("keep_recent_n", 30),
        "working": ("clear_on_task_complete", 0),
        "peer_monitor": ("keep_recent_n", 15),
    }


# Experience v2, Context System: each type's cap in tokens.
SEED_CAPS = {"identity": 10_000, "history": 50_000, "goals": 20_000, "relationships": 15_000,
             "skills": 30_000, "dreams": 15_000, "working": 64_000, "peer_monitor": 10_000}


def test_the_shipped_caps_are_the_seeds() -> None:
    assert dict(templates().citizen("opus").context_limits) == SEED_CAPS


def _sized(store: ContextStore, ctype: str, tokens: int) -> Context:
    """A context of one entry that renders to exactly `tokens` tokens."""
    ctx = store.load(ctype)
    ctx.entries = []
    ctx.add("")
    base = store.tokens(ctx)
    ctx.entries[0]["text"] = "x" * int((tokens - base) * CHARS_PER_TOKEN)
    while store.tokens(ctx) < tokens:
        ctx.entries[0]["text"] += "x"
    assert store.tokens(ctx) == tokens
    return ctx


@pytest.mark.parametrize("ctype", ORDER)
def test_each_cap_is_where_forgetting_starts(store: ContextStore, ctype: str) -> None:
    cap = SEED_CAPS[ctype]
    assert store.forget(_sized(store, ctype, cap)) == []  # at the cap: kept whole
    levels = store.forget(_sized(store, ctype, cap + 1))  # one token over: the fallback
    strategy = STRATEGIES[ctype][0]
    assert levels[0] == ("never: over cap, kept" if ctype == "identity" else f"1:{strategy}")


def test_level_two_summarizes_the_oldest_fifth_when_the_strategy_is_not_enough(
        store: ContextStore) -> None:
    ctx = store.load("dreams")  # keep_recent_n 30, cap 15,000
    for i in range(40):
        ctx.add(f"Dream {i}. " + "x" * int(520 * CHARS_PER_TOKEN))  # 30 of them: > the cap
    levels = store.forget(ctx)
    assert levels == ["1:keep_recent_n", "2:summarize_oldest_20pct"]
    assert len(ctx.entries) == 25  # 30 kept, the oldest 6 folded into one
    assert ctx.entries[0]["summary"] is True
    assert ctx.entries[0]["text"].startswith("[summary of 6 entries")
    assert "Dream 10." in ctx.entries[0]["text"] and ctx.entries[1]["text"].startswith("Dream 16.")
    assert store.tokens(ctx) <= SEED_CAPS["dreams"]


@pytest.mark.parametrize("ctype", ["history", "goals", "relationships", "skills", "dreams",
                                   "working", "peer_monitor"])
def test_every_context_ends_under_its_cap(store: ContextStore, ctype: str) -> None:
    cap = store.limits[ctype]
    fill(store, ctype, n=cap // 30)  # several times the cap
    ctx = store.load(ctype)
    assert store.tokens(ctx) <= cap
    assert ctx.meta["forgotten"][-1]["levels"][0].startswith("1:")


def test_keep_recent_n_keeps_the_newest(store: ContextStore) -> None:
    fill(store, "dreams", n=400, size=200)
    texts = [e["text"] for e in store.load("dreams").entries]
    assert len(texts) <= 30 and texts[-1].startswith("Entry 399.")


def test_archive_completed_moves_them_to_the_archive(store: ContextStore) -> None:
    fill(store, "goals", n=300)
    assert all(e.get("status") != "completed" for e in store.load("goals").entries)
    archive = store.dir / "archive" / "goals.jsonl"
    assert len(archive.read_text().splitlines()) == 150


def test_levels_escalate_when_the_strategy_is_not_enough(store: ContextStore) -> None:
    ctx = store.load("working")  # clear_on_task_complete: level 1 does nothing here
    ctx.add("x " * 200_000)  # one entry far over the cap
    levels = store.forget(ctx)
    assert levels[0] == "1:clear_on_task_complete"
    assert "3:truncate_oldest" in levels
    assert store.tokens(ctx) <= ctx.cap


def test_emergency_clear_keeps_metadata(store: ContextStore) -> None:
    ctx = store.load("history")
    ctx.cap = 1  # nothing fits: only the last level can satisfy it
    ctx.add("a long entry " * 10)
    levels = store.forget(ctx)
    assert levels[-1] == "4:emergency_clear"
    assert ctx.entries == [] and "created" in ctx.meta and ctx.meta["forgotten"]


def test_identity_is_never_forgotten(store: ContextStore) -> None:
    ctx = store.load("identity")
    ctx.add("core " * 20_000)
    assert store.forget(ctx) == ["never: over cap, kept"]
    assert len(ctx.entries) == 2


def test_only_changed_files_are_written(store: ContextStore) -> None:
    contexts = store.load_all()
    stamps = {t: store.path(t).stat().st_mtime_ns for t in ORDER}
    contexts["history"].add("something happened")
    store.save_all(contexts)
    changed = [t for t in ORDER if store.path(t).stat().st_mtime_ns != stamps[t]]
    assert changed == ["history"]


def test_a_corrupt_context_is_an_error_and_is_kept(store: ContextStore) -> None:
    store.path("skills").write_text("{broken")
    with pytest.raises(CorruptFile, match=r"skills\.json: not valid JSON"):
        store.load_all()
    assert store.path("skills").read_text() == "{broken"


def test_init_never_overwrites(store: ContextStore) -> None:
    ctx = store.load("identity")
    ctx.add("grown since")
    store.save_all({"identity": ctx})
    store.init("I am someone else.")
    assert [e["text"] for e in store.load("identity").entries] == ["I am opus.", "grown since"]


def test_the_working_context_is_emptied_when_a_wake_files_its_task(civ: Path) -> None:
    """The seed's clear_on_task_complete: a filed task's working state does not follow the
    citizen into its next wake (it is in history, in one line)."""
    from citizen.config import paths
    from citizen.home.tasks import TaskQueue
    from citizen.wake.flow import run_wake
    from tests.scripts import Actor, call

    home = paths.home("opus")
    task = TaskQueue(home.tasks).add("Write notes/a.md saying hello")
    actor = Actor(call("write_file", path="notes/a.md", content="hello"),
                  call("task_complete", summary="wrote it"))
    run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert TaskQueue(home.tasks).where(task.id) == "done"
    store = ContextStore(home.contexts, dict(templates().citizen("opus").context_limits),
                         estimate_tokens)
    assert store.load("working").entries == []
    assert any(task.id in e["text"] for e in store.load("history").entries)


def _grown_once(store: ContextStore, ctype: str = "history") -> None:
    """A save that rewrites the file whole (init's file has no journal token yet)."""
    ctx = store.load(ctype)
    ctx.add("first")
    store.save_all({ctype: ctx})


def _grow(store: ContextStore, text: str) -> None:
    ctx = store.load("history")
    ctx.add(text)
    store.save_all({"history": ctx})


def test_a_context_that_only_grew_is_appended_to_its_journal(store: ContextStore) -> None:
    _grown_once(store)
    before = store.path("history").stat()
    raw = store.path("history").read_bytes()
    _grow(store, "a wake happened")
    after = store.path("history").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store.path("history").read_bytes() == raw
    assert b"a wake happened" in store.journal("history").read_bytes()
    assert [e["text"] for e in store.load("history").entries] == ["first", "a wake happened"]
    store.save_all(store.load_all())  # nothing changed: nothing appended
    assert store.journal("history").read_text().count("\n") == 1


def test_any_other_change_rewrites_the_file_and_drops_the_journal(store: ContextStore) -> None:
    _grown_once(store)
    _grow(store, "second")
    assert store.journal("history").exists()
    ctx = store.load("history")
    ctx.entries[0]["text"] = "first, corrected"  # not a growth: the file is rewritten
    store.save_all({"history": ctx})
    assert not store.journal("history").exists()
    assert [e["text"] for e in store.load("history").entries] == ["first, corrected", "second"]


def test_a_crash_between_rewrite_and_journal_removal_adds_nothing_twice(
        store: ContextStore) -> None:
    _grown_once(store)
    _grow(store, "second")
    stale = store.journal("history").read_bytes()
    ctx = store.load("history")
    ctx.meta["note"] = "changed"  # a rewrite: "second" now lives in the file itself
    store.save_all({"history": ctx})
    store.journal("history").write_bytes(stale)  # as if killed before the unlink
    assert [e["text"] for e in store.load("history").entries] == ["first", "second"]
    _grow(store, "third")
    assert [e["text"] for e in store.load("history").entries] == ["first", "second", "third"]


def test_a_torn_journal_line_is_skipped_and_the_next_append_is_whole(
        store: ContextStore) -> None:
    _grown_once(store)
    _grow(store, "second")
    with store.journal("history").open("rb+") as fh:  # a writer killed mid-line: cut it
        fh.truncate(len(fh.read()) - 10)
    assert [e["text"] for e in store.load("history").entries] == ["first"]
    _grow(store, "third")
    assert [e["text"] for e in store.load("history").entries] == ["first", "third"]


def test_a_long_journal_is_folded_into_the_file(store: ContextStore) -> None:
    _grown_once(store)
    for i in range(JOURNAL_LINES):
        _grow(store, f"wake {i}")
    assert store.journal("history").read_text().count("\n") == JOURNAL_LINES
    _grow(store, "one more")
    assert not store.journal("history").exists()
    assert len(store.load("history").entries) == JOURNAL_LINES + 2


def test_a_change_in_place_after_a_save_is_saved_too(store: ContextStore) -> None:
    """What a save remembers of the disk shares no object with the context: an entry
    just appended, or a list inside the metadata, changed in place is seen next save."""
    contexts = store.load_all()
    ctx = contexts["history"]
    ctx.add("appended")
    store.save_all(contexts)  # only grew: a journal line
    ctx.entries[-1]["text"] = "appended, then corrected"
    store.save_all(contexts)
    ctx.meta.setdefault("notes", []).append("a note")
    store.save_all(contexts)
    ctx.meta["notes"].append("another")  # nested, in place
    store.save_all(contexts)
    again = store.load("history")
    assert again.entries[-1]["text"] == "appended, then corrected"
    assert again.meta["notes"] == ["a note", "another"]
