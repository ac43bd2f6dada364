"""ThoughtStream: the decision function's properties, temperature arithmetic, the
cross-process semaphore, and many processes agreeing on one decision."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.streams import (
    FLOOR,
    Semaphore,
    Settings,
    Stream,
    StreamError,
    Streams,
    Thought,
    cooled,
    decide,
    slots,
    stream_id,
    warmed,
)

NAMES = ("opus", "mira", "aria", "zed", "nova")
thoughts = st.lists(st.tuples(st.sampled_from(NAMES), st.booleans(),
                              st.floats(0, 1, allow_nan=False)), max_size=8)


def stream(ts: list[tuple[str, bool, float]], *, preset: str = "balanced",
           mentioned: tuple[str, ...] = (), msg: str = "m1", pressure: int = 0,
           created: float = 100.0, human: bool = False) -> Stream:
    s = Stream(stream_id(msg), created, NAMES, Settings.preset(preset), mentioned, pressure,
               human)
    for name, claiming, conf in ts:
        s.thoughts.setdefault(name, Thought(name, claiming, conf))
    return s


@given(thoughts, st.sampled_from(["strict", "balanced", "anarchic"]), st.text(max_size=8))
def test_the_decision_is_a_pure_function_and_never_grants_more_than_its_slots(
        ts: list[tuple[str, bool, float]], preset: str, msg: str) -> None:
    s = stream(ts, preset=preset, msg=msg)
    a, b = decide(s, 200.0), decide(s, 200.0)
    assert a == b and a is not None  # the window has passed: always decided
    assert len(a.granted) <= a.slots <= Settings.preset(preset).max_responders
    for name in a.granted:
        t = s.thoughts[name]
        assert t.claiming and t.confidence >= Settings.preset(preset).min_confidence
    assert set(a.granted).isdisjoint(a.denied)
    granted = [s.thoughts[n].confidence for n in a.granted]
    refused = [s.thoughts[n].confidence for n in a.denied]
    assert not granted or not refused or min(granted) >= max(refused)


@given(thoughts, st.sampled_from(NAMES))
def test_a_mention_overrides_slots_and_confidence_but_not_a_deferral(
        ts: list[tuple[str, bool, float]], name: str) -> None:
    s = stream(ts, mentioned=(name,))
    d = decide(s, 200.0)
    assert d is not None
    t = s.thoughts.get(name)
    assert (name in d.granted) == bool(t and t.claiming)


def test_slots_are_drawn_70_25_5_and_shrink_under_pressure() -> None:
    counts = {1: 0, 2: 0, 3: 0}
    for i in range(4000):
        counts[slots(stream([], preset="anarchic", msg=f"m{i}"))] += 1
    assert 0.66 < counts[1] / 4000 < 0.74 and 0.21 < counts[2] / 4000 < 0.29
    assert 0.03 < counts[3] / 4000 < 0.07
    assert all(slots(stream([], preset="anarchic", msg=f"m{i}", pressure=4)) == 1
               for i in range(200))


def test_early_exits_and_the_window() -> None:
    assert decide(stream([]), 100.5) is None  # nobody yet, window open
    d = decide(stream([("opus", True, 0.95)]), 100.01)
    assert d is not None and d.exit == "clear_winner" and d.granted == ("opus",)
    assert decide(stream([("opus", True, 0.6)]), 100.01) is None or \
        decide(stream([("opus", True, 0.6)]), 100.01).exit == "all_slots_claimed"
    everyone = [(n, False, 0.1) for n in NAMES]
    d = decide(stream(everyone), 100.01)
    assert d is not None and d.exit == "everyone_decided" and d.granted == ()
    d = decide(stream([("opus", True, 0.5)], preset="strict"), 103.5)
    assert d is not None and d.granted == () and d.denied == ("opus",)  # below 0.7
    assert d.exit in ("all_slots_claimed", "window")


@given(thoughts, st.sampled_from(["strict", "balanced", "anarchic"]), st.booleans())
def test_a_persons_message_is_never_left_unanswered(
        ts: list[tuple[str, bool, float]], preset: str, answer: bool) -> None:
    s = stream(ts, preset=preset, human=True)
    s.settings = Settings.preset(preset, answer_humans=answer)
    d = decide(s, 200.0)
    assert d is not None
    if not s.thoughts:
        assert d.granted == ()
    elif answer:
        assert d.granted, "someone answers a person"
        if d.fallback:  # only when no claim qualified; then the single most confident
            assert len(d.granted) == 1
            top = max(t.confidence for t in s.thoughts.values())
            assert s.thoughts[d.granted[0]].confidence == top
            assert set(d.granted).isdisjoint(d.silent)
    else:
        assert not d.fallback  # the room turned it off: silence is allowed again
    citizens = stream(ts, preset=preset)  # a citizen's message: silence stays valid
    assert not decide(citizens, 200.0).fallback  # type: ignore[union-attr]


def test_silenced_and_boosted_voices() -> None:
    s = stream([("opus", True, 0.9), ("mira", True, 0.2)])
    s.settings = Settings.preset("balanced", max_responders=1, silenced=("opus",),
                                 boosted=(("mira", 0.5),))
    d = decide(s, 200.0)
    assert d is not None and d.granted == ("mira",) and "opus" in d.silent


def test_temperature_arithmetic() -> None:
    assert warmed(0.5, "human") == pytest.approx(0.8)
    assert warmed(0.9, "human") == 1.0
    assert warmed(0.5, "serviced") == pytest.approx(0.3)
    assert warmed(0.1, "absent") == FLOOR
    assert cooled(0.8, 0.0, 9.9) == 0.8
    assert cooled(0.8, 0.0, 10.0) == pytest.approx(0.8 * 0.95)
    assert cooled(0.8, 0.0, 35.0) == pytest.approx(0.8 * 0.95 ** 3)
    assert cooled(0.8, 0.0, 100000.0) == FLOOR


def test_rooms_keep_presets_moderation_and_temperature(tmp_path: Path) -> None:
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    assert streams.settings("general").max_responders == 2
    streams.set_room("general", preset="strict")
    streams.set_room("general", min_confidence=0.5, silenced=["zed"])
    got = streams.settings("general")
    assert (got.max_responders, got.min_confidence, got.silenced) == (1, 0.5, ("zed",))
    with pytest.raises(StreamError, match="no preset"):
        streams.set_room("general", preset="chaos")
    assert streams.heat("general", "human") == pytest.approx(0.8)
    assert streams.heat("general", "serviced") == pytest.approx(0.6)


def _hold(directory: str, size: int, out: str) -> None:
    sem = Semaphore(Path(directory), size)
    with sem.slot(timeout_s=60):
        with Path(out).open("a") as fh:
            fh.write(f"in {time.monotonic()}\n")
        time.sleep(0.05)
        with Path(out).open("a") as fh:
            fh.write(f"out {time.monotonic()}\n")


def test_the_semaphore_never_exceeds_its_bound_across_ten_processes(tmp_path: Path) -> None:
    log = tmp_path / "log"
    procs = [multiprocessing.Process(target=_hold, args=(str(tmp_path / "sem"), 2, str(log)))
             for _ in range(10)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    events = sorted((float(t), kind) for kind, t in (x.split() for x in
                                                     log.read_text().splitlines()))
    inside = peak = 0
    for _, kind in events:
        inside += 1 if kind == "in" else -1
        peak = max(peak, inside)
    assert len(events) == 20 and peak <= 2


def _bid(root: str, sid: str, name: str, conf: float, out: str) -> None:
    streams = Streams(Path(root), NAMES, enforce_identity=False)
    streams.think(sid, name, True, conf, "I know this")
    decision = streams.wait_decision(sid, name, timeout_s=30)
    with Path(out).open("a") as fh:
        fh.write(json.dumps({"me": name, "decision": decision["granted"]}) + "\n")


def test_five_processes_agree_on_one_decision(tmp_path: Path) -> None:
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    sid = streams.open("<q1@example.org>", "Who knows about file locks?").id
    out = tmp_path / "out"
    procs = [multiprocessing.Process(target=_bid, args=(str(tmp_path), sid, n, c, str(out)))
             for n, c in zip(NAMES, (0.9, 0.8, 0.7, 0.2, 0.5), strict=True)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    seen = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(seen) == 5 and len({tuple(s["decision"]) for s in seen}) == 1
    assert tuple(seen[0]["decision"]) == tuple(streams.decision(sid)["granted"])
    with pytest.raises(StreamError, match="already bid"):
        streams.think(sid, "opus", False, 0.0)


@given(thoughts)
def test_without_coordination_every_claimer_answers(ts: list[tuple[str, bool, float]]) -> None:
    s = stream(ts)
    s.settings = Settings.preset("balanced", coordinate=False)
    d = decide(s, 200.0)
    assert d is not None
    assert set(d.granted) == {n for n, t in s.thoughts.items() if t.claiming}
    if len(s.thoughts) < len(NAMES):  # uncoordinated waits for every bid, not the window
        assert decide(s, 100.0 + 5.0) is None
