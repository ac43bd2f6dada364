"""ThoughtStream: the decision function's properties, temperature arithmetic, the
cross-process semaphore, and many processes agreeing on one decision. (Streams in a
citizen's wake and from the CLI: test_stream_wakes.py.)"""


from __future__ import annotations

import copy
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.errors import Invalid, NotAllowed
from shared.streams import (
    FLOOR,
    Semaphore,
    Settings,
    Stream,
    Streams,
    Thought,
    cooled,
    decide,
    load_factor,
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
    before = copy.deepcopy(s)
    random.seed(len(msg))  # whatever the process's random state, the same decision
    a = decide(s, 200.0)
    random.seed(len(msg) + 1)
    decide(stream([("aria", True, 0.9)], msg="other"), 200.0)  # no state kept between calls
    b = decide(s, 200.0)
    assert s == before, "decide changed the stream it was given"
    assert a == b and a is not None  # the window has passed: always decided
    # idle (no pressure): the cap widens to the room's idle slots (three; strict one)
    room = Settings.preset(preset)
    assert len(a.granted) <= a.slots <= max(room.max_responders, room.idle_slots)
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
    for i in range(4000):  # balanced, idle: the draw within three (anarchic has five)
        counts[slots(stream([], preset="balanced", msg=f"m{i}"))] += 1
    assert 0.66 < counts[1] / 4000 < 0.74 and 0.21 < counts[2] / 4000 < 0.29
    assert 0.03 < counts[3] / 4000 < 0.07
    assert all(slots(stream([], preset=preset, msg=f"m{i}", pressure=4)) == 1
               for i in range(200) for preset in ("balanced", "anarchic"))


def test_early_exits_and_the_window() -> None:
    assert decide(stream([]), 100.5) is None  # nobody yet, window open
    d = decide(stream([("opus", True, 0.95)]), 100.01)
    assert d is not None and d.exit == "clear_winner" and d.granted == ("opus",)
    # One claim below the clear-winner bar ends the window early only when it fills every
    # slot. The draw is seeded by the message: m1 draws two slots, m2 one.
    two, one = stream([("opus", True, 0.6)], msg="m1"), stream([("opus", True, 0.6)], msg="m2")
    assert (slots(two), slots(one)) == (2, 1)
    assert decide(two, 100.01) is None  # a slot is still open: the window waits
    d = decide(one, 100.01)
    assert d is not None and d.exit == "all_slots_claimed" and d.granted == ("opus",)
    everyone = [(n, False, 0.1) for n in NAMES]
    d = decide(stream(everyone), 100.01)
    assert d is not None and d.exit == "everyone_decided" and d.granted == ()
    # strict requires unanimity: its one slot claimed, it still waits for every bid
    assert decide(stream([("opus", True, 0.5)], preset="strict"), 102.9) is None
    d = decide(stream([("opus", True, 0.5)], preset="strict"), 103.5)
    assert d is not None and d.granted == () and d.denied == ("opus",)  # below 0.7
    assert d.exit == "window"


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


def test_the_load_factor_favours_the_under_used() -> None:
    assert load_factor(0, []) == 1.0 and load_factor(3, [3, 3, 3]) == 1.0
    assert load_factor(0, [0, 6, 6]) == pytest.approx(1.2)  # an average (4) below it
    assert load_factor(6, [0, 6, 6]) == pytest.approx(0.9)
    assert load_factor(100, [100, 0, 0]) == 0.8 and load_factor(0, [0, 100, 100]) == 1.2


def test_rooms_keep_presets_moderation_and_temperature(tmp_path: Path) -> None:
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    assert streams.settings("general").max_responders == 2
    streams.set_room("general", preset="strict")
    streams.set_room("general", min_confidence=0.5, silenced=["zed"])
    got = streams.settings("general")
    assert (got.max_responders, got.min_confidence, got.silenced) == (1, 0.5, ("zed",))
    with pytest.raises(Invalid, match="no preset"):
        streams.set_room("general", preset="chaos")
    assert streams.heat("general", "human") == pytest.approx(0.8)
    assert streams.heat("general", "serviced") == pytest.approx(0.6)


def _hold(directory: str, size: int, out: str) -> None:
    sem = Semaphore(Path(directory), size)
    with sem.slot(timeout_s=60):
        with Path(out).open("a") as fh:
            fh.write(f"in {time.monotonic()}\n")
        time.sleep(0.05)  # holding the slot a while, so the ten processes overlap
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


WAITER = ("import sys; from pathlib import Path; from shared.streams import Semaphore; "
          "Semaphore(Path(sys.argv[1]), 1).acquire(timeout_s=300)")


def test_a_waiter_killed_while_waiting_leaves_no_pressure(tmp_path: Path) -> None:
    """SIGKILL runs no `finally`: the waiter's mark stays, but its lock dies with it."""
    sem = Semaphore(tmp_path / "sem", 1)
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)}
    with sem.slot(timeout_s=5):  # the only slot is ours: the other process must wait
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(sem.dir)], env=env)
        try:
            deadline = time.monotonic() + 60
            while sem.pressure() != 1:
                assert time.monotonic() < deadline and waiter.poll() is None, "never waited"
                time.sleep(0.01)
        finally:
            waiter.send_signal(signal.SIGKILL)
            waiter.wait(30)
        assert waiter.returncode == -signal.SIGKILL
        assert len(list(sem.waiting_dir.iterdir())) == 1  # the dead waiter's mark is left
        assert sem.pressure() == 0
        assert list(sem.waiting_dir.iterdir()) == []  # and removed by the reader


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
    decided = streams.decision(sid)
    assert decided is not None
    assert tuple(seen[0]["decision"]) == tuple(decided["granted"])
    with pytest.raises(NotAllowed, match="already bid"):
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


@given(thoughts, st.integers(1, 4), st.integers(0, 10))
def test_work_seeking_volunteers_wants_exactly_its_slots(
        ts: list[tuple[str, bool, float]], wanted: int, pressure: int) -> None:
    s = stream(ts, pressure=pressure)
    s.settings = Settings.preset("balanced", fixed_slots=wanted)
    d = decide(s, 200.0)
    assert d is not None and d.slots == wanted  # no draw, no shrinking under pressure
    able = [t for t in s.thoughts.values() if t.claiming and t.confidence >= 0.3]
    assert len(d.granted) == min(wanted, len(able))


def test_a_directory_made_by_another_writer_meanwhile_is_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Five bidders make `thoughts/` at once: one that loses the race to mkdir must not
    take the FileExistsError for 'already bid'."""
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    sid = streams.open("<race@example.org>", "Who knows file locks?").id
    (streams.dir / sid / "thoughts").mkdir()  # the other writer got there first
    real = Path.exists
    monkeypatch.setattr(Path, "exists", lambda p: False if p.name == "thoughts" else real(p))
    streams.think(sid, "opus", True, 0.8, "I know flock")  # saw it missing, mkdir loses
    monkeypatch.undo()
    assert "opus" in streams.load(sid).thoughts


def test_records_written_before_the_one_author_key_and_timestamp_still_count(
        tmp_path: Path) -> None:
    """A stream from before: `created` and `ts` as epoch floats, the author under
    `citizen` (a decision: `decided_by`), one decision record file, a room without a
    schema version."""
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    sid = stream_id("<old@example.org>")
    folder = streams.dir / sid
    for sub in ("thoughts", "records"):
        (folder / sub).mkdir(parents=True)
    header = {"id": sid, "message_id": "<old@example.org>", "source": "say", "text": "hi",
              "room": "general", "sender": "operator", "human": True,
              "participants": ["opus", "mira"], "mentions": [], "pressure": 0,
              "settings": {"max_responders": 1, "min_confidence": 0.3,
                           "intention_window_ms": 1000}, "created": 1_700_000_000.5}
    (folder / "stream.json").write_text(json.dumps(header))
    (folder / "thoughts" / "opus.json").write_text(json.dumps(
        {"citizen": "opus", "claiming": True, "confidence": 0.8, "ts": 1_700_000_001.0}))
    (folder / "decision.json").write_text(json.dumps(
        {"granted": ["opus"], "denied": [], "silent": [], "slots": 1, "exit": "window",
         "decided_at_ms": 1000, "decided_by": "mira", "ts": 1_700_000_002.0}))
    (folder / "records" / "opus.json").write_text(json.dumps(
        {"citizen": "opus", "confidence": 0.8, "how": "rule"}))
    s = streams.load(sid)
    assert s.created == 1_700_000_000.5 and s.thoughts["opus"].ts == 1_700_000_001.0
    assert streams.decision(sid)["decided_by"] == "mira"  # type: ignore[index]
    assert streams.read_record(sid, "opus")["how"] == "rule"  # type: ignore[index]
    streams.record(sid, "opus", {"confidence": 0.8, "how": "rule", "action": "POSTED"})
    assert streams.read_record(sid, "opus")["action"] == "POSTED"  # type: ignore[index]
    (streams.dir / "rooms").mkdir()
    (streams.dir / "rooms" / "general.json").write_text(json.dumps(
        {"preset": "strict", "changes": {}, "temperature": 0.5, "updated": time.time()}))
    assert streams.settings("general").max_responders == 1
    assert streams.heat("general", "human") == pytest.approx(0.8)
