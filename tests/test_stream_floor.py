"""ThoughtStream floor control (§0.2, §6), adaptive slots (§10.1, §10.5), the moderator's
silence and pause on streams already open (§0.3), and `Decision.reasoning` (§3.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import NotAllowed
from shared.streams import (
    Settings,
    Stream,
    Streams,
    Thought,
    decide,
    slots,
    stream_id,
)

NAMES = ("opus", "mira", "aria", "zed", "nova")


def stream(ts: list[tuple[str, bool, float]], *, preset: str = "balanced", msg: str = "m1",
           pressure: int = 0, **changes: object) -> Stream:
    s = Stream(stream_id(msg), 100.0, NAMES, Settings.preset(preset, **changes), (), pressure)
    for name, claiming, conf in ts:
        s.thoughts[name] = Thought(name, claiming, conf)
    return s


def draws(preset: str, n: int = 3000, pressure: int = 0) -> dict[int, int]:
    counts: dict[int, int] = {}
    for i in range(n):
        k = slots(stream([], preset=preset, msg=f"m{i}", pressure=pressure))
        counts[k] = counts.get(k, 0) + 1
    return counts


def test_the_aggressive_and_conservative_presets() -> None:
    """§6.2: 2-3 responders, minimum 0.2, 1 s; §6.3: 1-2, minimum 0.5, 3 s."""
    aggressive, conservative = Settings.preset("aggressive"), Settings.preset("conservative")
    assert (aggressive.min_confidence, aggressive.intention_window_ms) == (0.2, 1000)
    assert (conservative.min_confidence, conservative.intention_window_ms) == (0.5, 3000)
    more, fewer = draws("aggressive"), draws("conservative")
    assert set(more) == {2, 3} and more[2] > more[3]
    assert set(fewer) == {1, 2} and fewer[1] > fewer[2]


def test_strict_requires_unanimity_before_anyone_gets_the_floor() -> None:
    """A clear winner, or the one slot claimed, ends the window early elsewhere; in a
    strict room everyone bids (or the window closes) first."""
    winner = [("opus", True, 0.95)]
    assert decide(stream(winner), 100.01) is not None  # balanced: an early exit
    assert decide(stream(winner, preset="strict"), 100.01) is None
    assert decide(stream(winner, preset="strict"), 102.9) is None
    everyone = [("opus", True, 0.95)] + [(n, False, 0.1) for n in NAMES[1:]]
    d = decide(stream(everyone, preset="strict"), 100.01)
    assert d is not None and d.exit == "everyone_decided" and d.granted == ("opus",)


def test_pressure_raises_the_minimum_and_an_idle_queue_widens_the_cap() -> None:
    alone = [("opus", True, 0.65)]
    assert decide(stream(alone, pressure=1), 200.0).granted == ("opus",)  # type: ignore[union-attr]
    d = decide(stream(alone, pressure=4), 200.0)  # the queue is deep: 0.7 at least
    assert d is not None and d.granted == () and "below the minimum 0.70" in d.reasoning
    assert decide(stream([("opus", True, 0.75)], pressure=4), 200.0).granted == ("opus",)  # type: ignore[union-attr]
    # idle: the balanced room (two) widens to three slots, in the seed's 5 %
    assert set(draws("balanced")) == {1, 2, 3} and set(draws("balanced", pressure=1)) == {1, 2}
    assert set(draws("strict")) == {1}  # one voice per message, idle or not
    # a cap the room (the mail room's one reply) or its moderator set holds when idle
    assert Settings.preset("balanced", max_responders=1).idle_slots == 1


def room(tmp_path: Path, preset: str, **changes: object) -> tuple[Streams, str]:
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    streams.set_room("general", preset=preset, max_responders=1, **changes)
    sid = streams.open(f"<{preset}@example.org>", "Who knows file locks?").id
    return streams, sid


@pytest.mark.parametrize("preset", ["balanced", "strict"])
def test_a_denied_claimer_overrides_only_where_overrides_are_allowed(
        tmp_path: Path, preset: str) -> None:
    streams, sid = room(tmp_path, preset)
    streams.think(sid, "opus", True, 0.95, "mine")
    streams.think(sid, "mira", True, 0.8, "this one matters to me", override=True)
    streams.think(sid, "aria", True, 0.8, "me too")
    for name in NAMES[3:]:
        streams.think(sid, name, False, 0.1)
    decision = streams.try_decide(sid, "zed")
    assert decision is not None and list(decision["granted"]) == ["opus"]
    with pytest.raises(NotAllowed, match="floor"):
        streams.respond(sid, "aria", "denied, and it did not override")
    if preset == "balanced":
        assert streams.floor(sid, "mira") == "override"
        streams.respond(sid, "mira", "overriding: it matters")
        assert streams.responses(sid)["mira"]["floor"] == "override"
    else:
        assert streams.floor(sid, "mira") == ""
        with pytest.raises(NotAllowed, match="floor"):
            streams.respond(sid, "mira", "strict rooms allow no override")


@pytest.mark.parametrize("preset", ["anarchic", "balanced"])
def test_a_late_bidder_interjects_only_where_interruptions_are_enabled(
        tmp_path: Path, preset: str) -> None:
    streams, sid = room(tmp_path, preset)
    streams.think(sid, "opus", True, 0.95, "mine")
    assert streams.try_decide(sid, "opus") is not None  # a clear winner, before zed bid
    streams.think(sid, "zed", True, 0.6, "one more thing")
    if preset == "anarchic":
        assert streams.floor(sid, "zed") == "interruption"
        assert sid in streams.waiting_for("zed")
        streams.respond(sid, "zed", "an interjection")
    else:
        assert streams.floor(sid, "zed") == "" and sid not in streams.waiting_for("zed")


def test_silence_and_pause_apply_to_streams_already_open(tmp_path: Path) -> None:
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    streams.set_room("general", max_responders=1)
    first = streams.open("<a@example.org>", "Who knows file locks?").id
    second = streams.open("<b@example.org>", "And fsync?").id
    streams.think(first, "opus", True, 0.95, "mine")
    assert list(streams.try_decide(first, "opus")["granted"]) == ["opus"]  # type: ignore[index]
    streams.think(second, "opus", True, 0.8, "mine")
    streams.think(second, "mira", True, 0.6, "I could")
    streams.set_room("general", silenced=["opus"])  # "opus, please stop" - both are open
    with pytest.raises(NotAllowed, match="silenced"):
        streams.respond(first, "opus", "granted before the silence")
    assert first not in streams.waiting_for("opus")
    decided = streams.try_decide(second, "mira", now=200.0)
    assert decided is not None and list(decided["granted"]) == ["mira"]
    assert "silenced by the moderator: opus" in decided["reasoning"]
    third = streams.open("<c@example.org>", "And umask?").id
    streams.think(third, "mira", True, 0.95, "mine")
    streams.set_room("general", paused=True)  # "everyone take a beat"
    assert streams.try_decide(third, "mira", now=200.0) is None
    assert streams.waiting_for("mira") == [] and streams.floor(second, "mira") == ""
    streams.set_room("general", paused=False)
    assert streams.try_decide(third, "mira", now=200.0) is not None
    assert second in streams.waiting_for("mira")


def test_the_decision_says_why_and_its_record_keeps_it(tmp_path: Path) -> None:
    """§3.1 `Decision.reasoning`: 'Teacher AI (conf=1.0), Helper AI (conf=0.9)'."""
    streams = Streams(tmp_path, NAMES, enforce_identity=False)
    streams.set_room("general", max_responders=1)
    sid = streams.open("<why@example.org>", "What is a variable?").id
    streams.think(sid, "opus", True, 1.0, "teaching")
    streams.think(sid, "mira", True, 0.9, "basics")
    streams.think(sid, "aria", True, 0.2, "maybe")
    decision = streams.try_decide(sid, "aria", now=200.0)
    assert decision is not None
    why = decision["reasoning"]
    assert "granted opus (1.00)" in why and "denied mira (0.90: no slot left)" in why
    assert "denied aria (0.20: below the minimum 0.30)" in why
    assert streams.decision(sid)["reasoning"] == why  # type: ignore[index]
