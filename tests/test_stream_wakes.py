"""ThoughtStream in a citizen's wake and from the CLI: bids, answers that keep failing, the
auto-bid under load, decision records and their replay, presence and ratings."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest


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
    assert [r.wake_type for r in daemon.requests.waiting()] == [None]  # nothing held
    daemon.pending.clear()
    while not daemon.requests.empty():
        daemon.requests.get_nowait()
    TaskQueue(paths.home("opus").tasks).hold("Mail from x", kind="TASK", source="mail",
                                             meta={"stream": "stream-0"}, task_id="t-1")
    daemon.slot_due()
    assert [r.wake_type for r in daemon.requests.waiting()] == ["STREAM", None]


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


def test_the_bid_prompt_shows_the_ambient_state(civ: Path) -> None:
    """§8.2, §9.2: the bidding model used to see temperature, pressure and who had bid,
    but not whether a person is here, the time since the last answer, the messages per
    minute, or the competing bids' confidences."""
    from citizen import civilization
    from citizen.wake.flow import run_wake
    from tests.scripts import say

    streams = civilization.streams()
    streams.heat("general", "present")
    sid = streams.open("<amb@example.org>", "Who knows backups?",
                       participants=["opus", "mira", "aria"]).id
    streams.think(sid, "mira", True, 0.8, "backups are mine")
    streams.think(sid, "aria", False, 0.15, "not mine")
    provider = claimer(0.6, lambda: say("restic"))
    assert run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider).status == "ok"
    (bid,) = [r for r in provider.requests if r.purpose == "stream_bid"]
    prompt = bid.messages[0]["content"]
    assert "a person is watching the room: yes" in prompt
    assert "Sent by a person: yes" in prompt
    assert "Since the room's last answer: no answer yet" in prompt
    assert "messages in the last minute: 1" in prompt
    assert "aria defers (0.15); mira claims (0.80)" in prompt
    rec = streams.read_record(sid, "opus")
    assert rec is not None and rec["prompt"] == prompt
    assert rec["ambient"]["competing"]["mira"] == {"claiming": True, "confidence": 0.8}


def test_a_bid_replays_as_other_citizens_side_by_side(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """§9.6: replay used to change only the model; now the same message in the same
    recorded room state goes to other citizens, each under its own name and focus."""
    from click.testing import CliRunner

    import citizen.llm
    from citizen import civilization
    from citizen.cli import cli
    from citizen.llm.scripted import ScriptedProvider
    from citizen.wake.flow import run_wake
    from tests.scripts import say

    streams = civilization.streams()
    sid = streams.open("<as@example.org>", "Who knows backups? @aria",
                       participants=["opus", "aria"]).id
    provider = claimer(0.7, lambda: say("restic"))
    assert run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider).status == "ok"
    rec = streams.read_record(sid, "opus")
    assert rec is not None
    replayer = ScriptedProvider(default=lambda r: say(json.dumps(
        {"claim": "You are aria" in r.messages[0]["content"], "confidence": 0.3,
         "reasoning": "replayed"})))
    monkeypatch.setattr(citizen.llm, "make_provider", lambda *a, **k: replayer)
    out = CliRunner().invoke(cli, ["stream", "replay", sid, "--citizen", "opus",
                                   "--as", "mira,aria"])
    assert out.exit_code == 0, out.output
    mira, aria = (r.messages[0]["content"] for r in replayer.requests)
    assert mira.startswith("You are mira") and aria.startswith("You are aria")
    room_lines = [line for line in rec["prompt"].splitlines() if line.startswith("- ")]
    for prompt in (mira, aria):  # the recorded room state, line for line
        assert [line for line in prompt.splitlines() if line.startswith("- ")
                and "mentioned" not in line] == [
            line for line in room_lines if "mentioned" not in line]
    assert "mentioned by name: True" in aria and "mentioned by name: False" in mira
    rows = out.output.splitlines()
    assert rows[1].startswith("recorded: opus") and rows[2].startswith("mira ")
    assert rows[3].startswith("aria ") and "True" in rows[3]


def test_a_message_in_my_focus_adds_the_expertise_boost_to_my_bid(civ: Path) -> None:
    """§10.3 context-aware selection: the same bid (0.5 from the model) gets +0.2 on a
    message in the bidder's focus (opus: Architecture) - enough to clear a 0.6 minimum
    that the same bid off its focus does not."""
    from citizen import civilization
    from citizen.wake.flow import run_wake
    from citizen.wake.types.stream import EXPERT_BOOST
    from tests.scripts import say

    streams = civilization.streams()
    streams.set_room("expert", min_confidence=0.6)
    got = {}
    for key, text in (("off", "Who knows backups?"),
                      ("in", "Which architecture fits a mail gateway?")):
        # a citizen's message: nobody claimed enough means nobody answers (no fallback)
        sid = streams.open(f"<{key}@example.org>", text, room="expert", sender="mira",
                           participants=["opus"]).id
        provider = claimer(0.5, lambda: say("an answer"))
        provider.max_concurrent = 4  # not a serial model: the model bids (auto)
        assert run_wake("opus", wake_type="STREAM",
                        provider=lambda c, s, p=provider: p).status == "ok"  # type: ignore[misc]
        rec = streams.read_record(sid, "opus")
        assert rec is not None and rec["how"] == "model" and rec["raw_confidence"] == 0.5
        assert (rec["calibration_factor"], rec["load_factor"]) == (1.0, 1.0)
        got[key] = (rec["expertise_boost"], rec["confidence"], rec["action"])
    assert got["off"] == (0.0, 0.5, "SILENT")
    assert got["in"] == (EXPERT_BOOST, 0.7, "POSTED")


def test_without_coordination_a_claimer_answers_without_waiting_for_the_others(
        civ: Path) -> None:
    """The seed's baseline (§1.1): every AI that wants to answer starts generating at
    once. A claimer in an uncoordinated room waited for every other bid (up to the
    window plus grace) and, with a peer busy elsewhere, ended undecided and unanswered."""
    from citizen import civilization
    from citizen.wake.flow import run_wake
    from tests.scripts import say

    streams = civilization.streams()
    streams.set_room("bench", "balanced", coordinate=False)
    sid = streams.open("<stampede@example.org>", "Who knows backups?", room="bench",
                       participants=["opus", "mira"]).id
    provider = claimer(0.8, lambda: say("snapshots, then verify them"))
    result = run_wake("opus", wake_type="STREAM", provider=lambda c, s: provider)
    assert result.status == "ok"
    assert streams.decision(sid) is None  # mira has not bid: nothing is decided yet
    rec = streams.read_record(sid, "opus")
    assert rec is not None and rec["action"] == "POSTED"
    assert streams.responses(sid)["opus"]["text"] == "snapshots, then verify them"
    assert streams.floor(sid, "mira") == ""  # no claim, no floor
    streams.think(sid, "mira", True, 0.4)  # a late claimer speaks too, decided or not
    assert streams.try_decide(sid, "mira") is not None
    assert streams.floor(sid, "mira") == "granted"
