"""Three citizen daemons debate to a validated crux, each move in its own DEBATE wake,
the next participant rung by doorbell: started by `citizen debate start`, and by an
operator's `[debate]` mail (the crux and transcript come back by mail)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.anthropic_server import MessagesServer, tool_use
from tests.daemons import cli, daemon_env, start, wait_for
from tests.debating import scripted_debater
from tests.mailserver import MailSystem
from tests.test_mail import OPERATOR, OPUS, folder, mail, mx, opus_mail  # noqa: F401

CITIZENS = ("opus", "mira", "aria")
SMALL = ("--budget", "DISCOVERY=4-6", "--budget", "CRUX_LOCK=6-14", "--budget",
         "EVIDENCE=3-6")


def volunteering_debater(body: dict[str, Any]) -> dict[str, Any] | None:
    """The scripted debater, and bids: mira volunteers, aria defers."""
    if (body.get("tool_choice") or {}).get("name") == "respond" and \
            "claim" in body["tools"][-1]["input_schema"]["properties"]:
        mira = "You are mira," in json.dumps(body)
        return tool_use("respond", {"claim": mira, "confidence": 0.8 if mira else 0.2,
                                    "reasoning": "volunteering"})
    return scripted_debater(body)


def test_three_daemons_debate_to_a_validated_crux(civ: Path,
                                                  messages_api: MessagesServer) -> None:
    messages_api.responder = scripted_debater
    env = daemon_env(civ, messages_api)
    procs = [start(env, n, "--interval", "3600", "--first-wake", "3600") for n in CITIZENS]
    try:
        out = cli(env, "debate", "start", "--topic", "Tests before features",
                  "--with", "opus,mira,aria", *SMALL)
        did = out.split()[1]
        crux = civ / "shared" / "debates" / did / "crux.json"
        wait_for(crux.exists, timeout=240, every=0.3)
        followed = cli(env, "debate", "follow", did, "--timeout", "5")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=60)
    result = json.loads(crux.read_text())["crux"]  # the plan's {"crux": {...}}
    assert result["validated"], result["failed_checks"]
    shown = cli(env, "debate", "show", did)
    assert "CONVERGED" in shown and "crux:      VALIDATED" in shown
    assert "opus -> " in shown and "INCOMPLETE" in shown  # the steelman table
    (row,) = json.loads(cli(env, "debates", "--json"))
    assert row["calls"] == row["moves"] and row["tokens"] > 0 and row["seconds"] > 0
    for kind in ("stage_transition", "steelman_graded", "lock_succeeded", "debate_complete"):
        assert kind in followed
    # each participant made its own moves in its own wakes
    for name in CITIZENS:
        wakes = list((civ / name / "logs" / "wakes").glob("*-DEBATE.jsonl"))
        assert wakes, f"{name} never woke for the debate"


def test_a_debate_by_mail_returns_its_crux_by_mail(opus_mail: Path, mx: MailSystem,  # noqa: F811
                                                   messages_api: MessagesServer) -> None:
    cfg = opus_mail / "config.json"
    data = json.loads(cfg.read_text())
    data["debate_budgets"] = {"DISCOVERY": [4, 6], "CRUX_LOCK": [6, 14], "EVIDENCE": [3, 6]}
    cfg.write_text(json.dumps(data))
    messages_api.responder = volunteering_debater
    env = daemon_env(opus_mail.parent, messages_api)
    # A wake per citizen at once: opus's wake holds its wake permit while it waits for
    # the volunteers' bids, and with the default bound (the CPUs, 2 here) a peer's wake
    # may wait for a permit past the volunteers' window - then nobody volunteers and
    # the caller fills the seats (what this test is not about; the bound's own tests
    # are tests/test_permits*.py).
    operator = opus_mail.parent / "operator"
    operator.mkdir()
    (operator / "broker.json").write_text(json.dumps({"max_working_wakes": len(CITIZENS)}))
    env["EXPERIENCE_OPERATOR_DIR"] = str(operator)
    procs = [start(env, n, "--interval", "3600", "--first-wake", "3600") for n in CITIZENS]
    try:
        original = mail("[debate] Tests before features", body="Settle this, please.")
        mx.send(original, OPERATOR, OPUS)
        replies = wait_for(lambda: folder(mx, OPERATOR, "INBOX"), timeout=240, every=1.0)
        started = replies[0].get_content()
        crux_mail = wait_for(lambda: [m for m in folder(mx, OPERATOR, "INBOX")
                                      if "has ended" in m.get_content()], timeout=240,
                             every=1.0)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.communicate(timeout=60)
    assert "debate debate-" in started and "started among opus, aria, mira" in started
    # opus asked for volunteers: mira claimed, aria deferred (and filled the second seat)
    (asked,) = [d for d in (opus_mail.parent / "shared" / "streams").glob("stream-*")
                if json.loads((d / "stream.json").read_text())["source"] == "volunteer"]
    decision = json.loads((asked / "decision.json").read_text())
    assert decision["granted"] == ["mira"] and decision["slots"] == 2
    assert {json.loads(r.read_text())["action"] for r in (asked / "records").glob("*.json")} \
        == {"VOLUNTEERED", "SILENT"}
    body = crux_mail[0].get_content()
    assert crux_mail[0]["In-Reply-To"] == original["Message-ID"]
    assert '"validated": true' in body and "# Debate debate-" in body
