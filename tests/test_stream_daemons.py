"""Three daemons coordinate a broadcast: every one bids, all agree on one decision,
only the granted generate; the recorded decision replays on another model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.anthropic_server import MessagesServer, text, tool_use
from tests.daemons import cli, daemon_env, start, wait_for

CITIZENS = ("opus", "mira", "aria")
BIDS = {"opus": (True, 0.9), "mira": (True, 0.6), "aria": (False, 0.1)}


def council(body: dict[str, Any]) -> dict[str, Any]:
    prompt = body["messages"][-1]["content"]
    prompt = prompt if isinstance(prompt, str) else prompt[0]["text"]
    me = re.search(r"You are (\w+), a citizen", prompt)[1]  # type: ignore[index]
    if (body.get("tool_choice") or {}).get("name") == "respond":
        claim, conf = BIDS[me]
        return tool_use("respond", {"claim": claim, "confidence": conf,
                                    "reasoning": f"{me} on file locks"})
    return text(f"{me}: a file lock serialises writers.")


def test_three_daemons_coordinate_and_only_the_granted_generate(
        civ: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = council
    env = daemon_env(civ, messages_api)
    procs = [start(env, n, "--interval", "3600", "--first-wake", "3600") for n in CITIZENS]
    try:
        # A window longer than a wake process takes to start (≈2 s), so every bid counts.
        cli(env, "room", "set", "general", "--preset", "balanced", "--max-responders", "1",
            "--window-ms", "15000")
        out = cli(env, "say", "Who can explain file locks?", "--wait", "60")
        sid = out.split()[1]
        records = civ / "shared" / "streams" / sid / "records"
        wait_for(lambda: len(list(records.glob("*.json"))) == 3, timeout=60)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=60)
    decision = json.loads((civ / "shared" / "streams" / sid / "decision.json").read_text())
    # One slot: the first claim fills it (the seed's all-slots-claimed early exit), so
    # opus or mira - whichever bid first - answers; aria deferred and never does.
    assert decision["slots"] == 1 and len(decision["granted"]) == 1
    (winner,) = decision["granted"]
    assert winner in ("opus", "mira")
    assert f"granted: {winner}" in out and f"{winner}: a file lock serialises writers." in out
    seen = {n: json.loads((records / f"{n}.json").read_text()) for n in CITIZENS}
    assert {n: r["action"] for n, r in seen.items()} == {
        n: "POSTED" if n == winner else "SILENT" for n in CITIZENS}
    assert all(r["decision"]["granted"] == [winner] for r in seen.values())  # all agree
    answers = [b for b in messages_api.requests if not b.get("tool_choice")]
    assert len(answers) == 1 and f"You are {winner}" in json.dumps(answers[0]["messages"])
    for name in (n for n in CITIZENS if n != winner):  # the denied made no generation call
        logs = (civ / name / "logs" / "wakes").glob("*-STREAM.jsonl")
        purposes = [json.loads(x).get("purpose") for log in logs
                    for x in log.read_text().splitlines()]
        assert "stream_answer" not in purposes
        # It bid with the model, or came after the decision and made no call at all.
        assert ("stream_bid" in purposes) == (seen[name]["how"] == "model")
    shown = cli(env, "decisions", "show", sid)
    assert f"{winner}: POSTED" in shown and "aria: SILENT" in shown
    # The winner always bid with the model (the others may have come after the decision).
    replayed = cli(env, "decisions", "replay", sid, "--citizen", winner, "--provider", "local")
    assert "recorded" in replayed and "claim" in replayed and "gemma" in replayed.lower()
    cli(env, "decisions", "rate", sid, "--citizen", "mira", "--score", "0.2")
    assert "mira" in cli(env, "decisions", "calibration")
