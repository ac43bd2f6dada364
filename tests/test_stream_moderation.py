"""A decision names the silence it applied (`moderated`); in server mode every reader
checks it against the room's silence while the stream was open - so lifting a silence
later keeps the decision sound, and a silence that was never in force is refused."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from shared import clock
from shared.streams import Streams

CITIZEN = "nobody"  # a real Unix user that is not this process: the silenced bidder
UID = pwd.getpwnam(CITIZEN).pw_uid
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another owner")


def bid_on(tmp_path: Path) -> tuple[Streams, str]:
    """A stream where root claims at 0.6 and the citizen (its own file) at 0.9, one slot."""
    streams = Streams(tmp_path, ["root", CITIZEN], enforce_identity=True)
    streams.set_room("general", max_responders=1)
    sid = streams.open("<hush@example.org>", "Who knows file locks?").id
    streams.think(sid, "root", True, 0.6, "I could")
    path = streams.threads.dir(sid) / "thoughts" / f"{CITIZEN}.json"  # its process writes it
    path.write_text(json.dumps({"author": CITIZEN, "claiming": True, "confidence": 0.9,
                                "reasoning": "mine", "ts": clock.now()}))
    os.chown(path, UID, -1)
    assert set(streams.load(sid).thoughts) == {"root", CITIZEN}
    return streams, sid


def test_a_decision_stays_sound_after_the_silence_it_applied_is_lifted(
        tmp_path: Path) -> None:
    streams, sid = bid_on(tmp_path)
    streams.set_room("general", silenced=[CITIZEN])  # "nobody, please stop"
    decided = streams.try_decide(sid, "root")
    assert decided is not None and list(decided["granted"]) == ["root"]
    assert list(decided["moderated"]) == [CITIZEN]
    streams.set_room("general", silenced=[])  # the moderator lifts it afterwards
    again = streams.decision(sid)
    assert again is not None and list(again["granted"]) == ["root"]  # was refused: None
    assert streams.floor(sid, "root") == "granted"


def forge(streams: Streams, sid: str) -> None:
    """root writes a decision granting itself by 'silencing' the more confident bidder."""
    streams.threads.write(sid, "decision.json", "root", {
        "granted": ["root"], "denied": [], "silent": [CITIZEN], "slots": 1,
        "exit": "everyone_decided", "decided_at_ms": 10, "decided_by": "root",
        "considered": ["root", CITIZEN], "moderated": [CITIZEN]})


def test_a_decision_silencing_whom_nobody_silenced_is_refused(tmp_path: Path) -> None:
    streams, sid = bid_on(tmp_path)
    forge(streams, sid)
    assert streams.decision(sid) is None


def test_a_silence_lifted_before_the_stream_opened_does_not_vouch_for_it(
        tmp_path: Path) -> None:
    """Once silenced is not enough: the silence must have been in force while it was open."""
    streams, sid = bid_on(tmp_path)

    def long_ago(data: dict[str, Any]) -> None:
        data["silence_log"] = [[clock.now(1000.0), [CITIZEN]], [clock.now(2000.0), []]]

    # the operator's settings file keeps the silences (the room's document, temperature)
    streams.rooms.governance.update("general", {}, long_ago)
    assert streams.rooms.silence_history("general") == [(1000.0, (CITIZEN,)), (2000.0, ())]
    forge(streams, sid)
    assert streams.decision(sid) is None


def test_the_room_keeps_each_silence_with_when(tmp_path: Path) -> None:
    streams = Streams(tmp_path, ["root", CITIZEN], enforce_identity=True)
    streams.set_room("general", silenced=[CITIZEN])
    streams.set_room("general", min_confidence=0.5)  # no change to the silence: no entry
    streams.set_room("general", preset="strict")  # a preset resets the room's changes
    history = streams.rooms.silence_history("general")
    assert [names for _, names in history] == [(CITIZEN,), ()]
    assert history[0][0] <= history[1][0] <= clock.time()
