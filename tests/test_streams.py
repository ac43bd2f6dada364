"""ThoughtStream: the decision function's properties, temperature arithmetic, the
cross-process semaphore, and many processes agreeing on one decision."""

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
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

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
    d = decide(stream([("opus", True, 0.5)], preset="strict"), 103.5)
    assert d is not None and d.granted == () and d.denied == ("opus",)  # below 0.7
    assert d.exit == "all_slots_claimed"  # strict has one slot, and opus claimed it


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
    assert tuple(seen[0]["decision"]) == tuple(streams.decision(sid)["granted"])
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


def test_presence_warms_and_cools_a_room_from_the_cli(civ: Path) -> None:
    from click.testing import CliRunner

    from citizen.cli import cli

    runner = CliRunner()
    here = runner.invoke(cli, ["room", "presence", "general", "--here"])
    assert here.exit_code == 0 and "temperature 0.70" in here.output
    away = runner.invoke(cli, ["room", "presence", "general", "--away"])
    assert away.exit_code == 0 and "temperature 0.30" in away.output
    bad = runner.invoke(cli, ["room", "presence", "Bad Room!"])
    assert bad.exit_code == 1 and "room names are" in bad.output


def test_replay_refuses_a_record_without_a_bid(civ: Path) -> None:
    from click.testing import CliRunner

    from citizen import civilization
    from citizen.cli import cli

    streams = civilization.streams()
    sid = streams.open("<late@example.org>", "Who knows backups?").id
    streams.record(sid, "opus", {"prompt": "", "how": "late", "claim": False,
                                 "reasoning": "decided before my bid"})
    out = CliRunner().invoke(cli, ["decisions", "replay", sid, "--citizen", "opus"])
    assert out.exit_code == 1 and "made no bid" in out.output
    out = CliRunner().invoke(cli, ["decisions", "replay", sid, "--citizen", "mira"])
    assert out.exit_code == 1 and "no decision record" in out.output


def claimer(confidence: float, answer: Callable[[], object]) -> Any:
    """A scripted model that claims every stream at `confidence` and answers `answer()`."""
    from citizen.llm.base import Request
    from citizen.llm.scripted import ScriptedProvider
    from tests.scripts import say

    def model(request: Request) -> object:
        if request.purpose == "stream_bid":
            return say(json.dumps({"claim": True, "confidence": confidence,
                                   "reasoning": "mine"}))
        return answer()

    return ScriptedProvider(default=model)  # type: ignore[arg-type]


def test_a_granted_answer_that_keeps_failing_closes_after_three_wakes(civ: Path) -> None:
    from citizen import civilization
    from citizen.errors import ProviderError
    from citizen.wake.flow import run_wake

    def down() -> object:
        raise ProviderError("the model server is down")

    streams = civilization.streams()
    sid = streams.open("<down@example.org>", "Who knows backups?", participants=["opus"]).id
    provider = claimer(0.8, down)
    for attempt in (1, 2, 3):
        result = run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider)
        assert result.status == "ok"
        rec = streams.read_record(sid, "opus")
        assert rec is not None and rec["action"] == "FAILED"
        assert rec["answer_failures"] == attempt
        assert ("opus" in streams.responses(sid)) == (attempt == 3)
    assert "the model server is down" in streams.responses(sid)["opus"]["text"]
    bids = [r for r in provider.requests if r.purpose == "stream_bid"]
    assert len(bids) == 1  # one bid; the retries only retried the answer
    calls = len(provider.requests)
    idle = run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider)
    assert idle.status == "idle" and len(provider.requests) == calls  # closed: no more calls


def test_a_held_mail_asks_for_a_stream_wake_at_every_slot(civ: Path) -> None:
    from citizen.config import paths
    from citizen.daemon.process import Daemon
    from citizen.home.tasks import TaskQueue

    daemon = Daemon("opus", interval_s=3600)
    daemon.slot_due()
    assert [r.wake_type for r in list(daemon.requests.queue)] == [None]  # nothing held
    daemon.pending.clear()
    daemon.requests.queue.clear()
    TaskQueue(paths.home("opus").tasks).hold("Mail from x", kind="TASK", source="mail",
                                             meta={"stream": "stream-0"}, task_id="t-1")
    daemon.slot_due()
    assert [r.wake_type for r in list(daemon.requests.queue)] == ["STREAM", None]


def test_on_a_serial_or_busy_model_an_auto_bid_is_a_rule_and_costs_no_call(civ: Path) -> None:
    from citizen import civilization
    from citizen.wake.flow import run_wake
    from tests.scripts import say

    streams = civilization.streams()
    sem = streams.semaphore()
    # deeper than 3, or a model serving one request at a time: the rule
    for depth, serial, how in ((4, False, "rule"), (3, False, "model"), (0, True, "rule")):
        with ExitStack() as others:  # other daemons waiting for the model, alive
            for _ in range(depth):
                others.enter_context(sem.waiting())
            sid = streams.open(f"<q-{depth}-{serial}@example.org>", "Who knows Storage?",
                               participants=["opus"]).id
            provider = claimer(0.7, lambda: say("an answer"))
            provider.max_concurrent = 1 if serial else 4
            result = run_wake("opus", wake_type="STREAM",
                              provider=lambda c, s, p=provider: p)  # type: ignore[misc]
        assert result.status == "ok"
        rec = streams.read_record(sid, "opus")
        assert rec is not None and rec["how"] == how and rec["ambient"]["pressure"] == depth
        purposes = [r.purpose for r in provider.requests]
        assert purposes == (["stream_answer"] if how == "rule" else
                            ["stream_bid", "stream_answer"])


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


def test_the_rate_help_says_what_a_rating_does_to_calibration(civ: Path) -> None:
    """The help used to say a right silence rates 1; the code reads 1 as 'should have
    spoken' and raises the factor, so following the help made silent citizens louder."""
    from click.testing import CliRunner

    from citizen import civilization
    from citizen.cli import cli

    runner = CliRunner()
    help_text = runner.invoke(cli, ["stream", "rate", "--help"]).output
    assert "should have spoken" in help_text and "right silence is 0" in help_text
    streams = civilization.streams()
    for n in range(3):  # three bids at confidence 0.4, staying silent
        sid = streams.open(f"<r{n}@example.org>", "Who knows backups?").id
        streams.record(sid, "mira", {"prompt": "p", "how": "model", "claim": False,
                                     "confidence": 0.4, "reasoning": "not mine"})
        streams.record(sid, "aria", {"prompt": "p", "how": "model", "claim": False,
                                     "confidence": 0.4, "reasoning": "not mine"})
        for name, score in (("mira", "0"), ("aria", "1")):
            out = runner.invoke(cli, ["stream", "rate", sid, "--citizen", name,
                                      "--score", score])
            assert out.exit_code == 0, out.output
    # as documented: a right silence rated 0 lowers the factor; a 1 raises it (speak more)
    assert streams.calibration("mira")["factor"] < 1.0 < streams.calibration("aria")["factor"]


def test_a_decision_record_keeps_what_the_bidder_saw_and_a_replay_sends_it(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """§9.2: a record used to keep only the user prompt - no system prompt or contexts,
    no presence, no time since the last answer - so a replay was not what the bidder saw."""
    from click.testing import CliRunner

    import citizen.llm
    from citizen import civilization
    from citizen.cli import cli
    from citizen.config import paths
    from citizen.home.wakelog import WakeLog
    from citizen.llm.scripted import ScriptedProvider
    from citizen.wake.flow import run_wake
    from tests.scripts import say

    streams = civilization.streams()
    streams.heat("general", "present")
    sid = streams.open("<seen@example.org>", "Who knows backups?", participants=["opus"]).id
    provider = claimer(0.8, lambda: say("restic, nightly"))
    assert run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider).status == "ok"
    rec = streams.read_record(sid, "opus")
    assert rec is not None and rec["action"] == "POSTED"
    (bid,) = [r for r in provider.requests if r.purpose == "stream_bid"]
    home = paths.home("opus")
    assert rec["system_blobs"] and [WakeLog.read_blob(home, k)
                                    for k in rec["system_blobs"]] == list(bid.system)
    assert not any(b in json.dumps(rec) for b in bid.system if len(b) > 40)  # keys, not texts
    ambient = rec["ambient"]
    assert ambient["user_present"] is True and ambient["from_person"] is True
    assert ambient["messages_in_last_minute"] == 1
    assert ambient["time_since_last_response_s"] is None  # nobody had answered in the room
    # a second stream sees the first one's answer
    sid2 = streams.open("<seen2@example.org>", "And restores?", participants=["opus"]).id
    run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider)
    ambient2 = streams.read_record(sid2, "opus")["ambient"]  # type: ignore[index]
    assert ambient2["time_since_last_response_s"] >= 0  # a number: opus had answered
    assert ambient2["messages_in_last_minute"] == 2

    replayer = ScriptedProvider(default=lambda r: say(json.dumps(
        {"claim": False, "confidence": 0.3, "reasoning": "replayed"})))
    monkeypatch.setattr(citizen.llm, "make_provider", lambda *a, **k: replayer)
    out = CliRunner().invoke(cli, ["stream", "replay", sid, "--citizen", "opus"])
    assert out.exit_code == 0, out.output
    (again,) = replayer.requests
    assert again.messages[0]["content"] == rec["prompt"] and again.system == bid.system
    assert "replayed" in out.output
