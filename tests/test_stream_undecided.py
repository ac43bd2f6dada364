"""Every person's message in a stream ends with a recorded decision (issue 44): a wait
that ends undecided - the room paused during it, the bidder's wake killed after its
bid - is shown (`citizen stream list --open`), and the next wake (rung by a resume or
`citizen stream reopen`) decides it from the bids that arrived, and the granted answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner


def claimer(confidence: float, on_bid: Any = None) -> Any:
    """A scripted model that claims at `confidence` (calling `on_bid` first) and answers."""
    from citizen.llm.base import Request
    from citizen.llm.scripted import ScriptedProvider
    from tests.scripts import say

    def model(request: Request) -> object:
        if request.purpose == "stream_bid":
            if on_bid is not None:
                on_bid()
            return say(json.dumps({"claim": True, "confidence": confidence,
                                   "reasoning": "mine"}))
        return say("an answer")

    provider = ScriptedProvider(default=model)  # type: ignore[arg-type]
    provider.max_concurrent = 4  # not a serial model: the model bids
    return provider


def test_a_stream_paused_during_its_wait_is_decided_and_answered_after_the_resume(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The moderator pauses the room while opus waits for the decision: the wait used to
    end in a LockTimeout, no record, and nothing ever listed the stream again."""
    from citizen import civilization
    from citizen.cli import cli
    from citizen.wake.flow import run_wake
    from citizen.wake.types import stream as wake
    from shared.streams import summary

    monkeypatch.setattr(wake, "DECISION_GRACE_S", 0.2, raising=False)
    streams = civilization.streams()
    sid = streams.open("<pause@example.org>", "Who knows backups?",
                       participants=["opus", "mira"]).id
    provider = claimer(0.6, lambda: streams.set_room("general", paused=True))
    assert run_wake("opus", wake_type="STREAM",
                    provider=lambda c, s: provider).status == "ok"
    rec = streams.read_record(sid, "opus")
    assert rec is not None and rec["action"] == "TIMEOUT"
    assert streams.decision(sid) is None
    assert summary.summary(streams, sid)["state"] == summary.PAUSED
    runner = CliRunner()
    listed = runner.invoke(cli, ["stream", "list", "--open", "--json"])
    assert listed.exit_code == 0 and [r["id"] for r in json.loads(listed.output)] == [sid]
    refused = runner.invoke(cli, ["stream", "reopen", sid])
    assert refused.exit_code == 1 and "--resume" in refused.output
    resumed = runner.invoke(cli, ["room", "set", "general", "--resume"])
    assert resumed.exit_code == 0 and f"reopened {sid}" in resumed.output
    assert sid in streams.waiting_for("opus")  # its next wake decides it
    assert run_wake("opus", wake_type="STREAM",
                    provider=lambda c, s: provider).status == "ok"
    decision = streams.decision(sid)
    assert decision is not None and decision["granted"] == ["opus"]
    assert streams.responses(sid)["opus"]["text"] == "an answer"
    assert summary.summary(streams, sid)["state"] == summary.ANSWERED
    assert [r.purpose for r in provider.requests].count("stream_bid") == 1  # no 2nd bid
    assert sid not in streams.waiting_for("opus")


def test_a_bid_whose_wake_died_before_the_decision_is_decided_by_the_next_wake(
        civ: Path) -> None:
    """opus bid and its wake was killed before the decision (no record kept): the stream
    used to stay undecided for ever - opus had bid, so no gate listed it again."""
    from citizen import civilization
    from citizen.cli import cli
    from citizen.wake.flow import run_wake
    from shared.streams import summary

    streams = civilization.streams()
    sid = streams.open("<killed@example.org>", "Who knows backups?",
                       participants=["opus", "mira"]).id
    streams.think(sid, "opus", True, 0.6, "mine")  # ... and then SIGKILL
    runner = CliRunner()
    listed = runner.invoke(cli, ["stream", "list", "--open"])
    assert listed.exit_code == 0 and "STATE" in listed.output and "undecided" in listed.output
    rang = runner.invoke(cli, ["stream", "reopen", sid])
    assert rang.exit_code == 0 and "rang mira, opus" in rang.output
    assert streams.waiting_for("opus") == [sid]
    provider = claimer(0.9)
    assert run_wake("opus", wake_type="STREAM",
                    provider=lambda c, s: provider).status == "ok"
    decision = streams.decision(sid)
    assert decision is not None and decision["granted"] == ["opus"]
    rec = streams.read_record(sid, "opus")
    assert rec is not None and rec["how"] == "recovered" and rec["action"] == "POSTED"
    assert [r.purpose for r in provider.requests] == ["stream_answer"]  # no 2nd bid
    assert summary.summary(streams, sid)["state"] == summary.ANSWERED
    done = runner.invoke(cli, ["stream", "reopen", sid])
    assert done.exit_code == 0 and "answered: nothing owed" in done.output
    assert json.loads(runner.invoke(cli, ["stream", "list", "--open", "--json"]).output) == []
