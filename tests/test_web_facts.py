"""The dashboard's Decisions and Money facts (citizen.web.facts), and the one path for a
person's decision from the web (citizen.admin.approvals): against a dev civilization
with real records, read from the stores on every call."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from citizen import civilization
from citizen.admin import helper
from citizen.broker import mailstate, service
from citizen.broker.ledger import CapExceeded, Caps, Ledger
from citizen.config import paths
from citizen.home import spend
from citizen.web.facts import decisions, money
from shared.errors import NotAllowed
from tests.thoughtworld import HELLO
from tests.web_world import commons, waiting

TOKEN = "the-operators-token-0123456789"  # noqa: S105 - a test's token
HOSTILE = "<script>alert(1)</script>\x1b]0;x\x07"


@pytest.fixture
def token(civ: Path) -> str:
    path = paths.web_token()
    path.parent.mkdir(mode=0o700, exist_ok=True)
    # The format citizen.web.auth writes: a comment line, then the token.
    path.write_text(f"# the operator's token\n{TOKEN}\n")
    return TOKEN


# ---------------------------------------------------------------- the queue

def test_the_queue_is_empty_exactly_when_nothing_waits_and_is_never_cached(
        civ: Path, token: str) -> None:
    empty = decisions.waiting_for_a_person()
    assert empty == {"items": [], "count": 0, "unreadable": []}
    pid = waiting()
    queue = decisions.waiting_for_a_person()
    assert [(i["kind"], i["id"]) for i in queue["items"]] == [("proposal", pid)]
    assert queue["count"] == 1
    decisions.record_human_decision(pid, False, "not now", "alice", token)
    assert decisions.waiting_for_a_person()["count"] == 0


def test_an_onboarding_request_waits_for_the_operator(civ: Path) -> None:
    from citizen.broker import onboarding

    with onboarding.held() as folder:
        (folder / "0001-nova.json").write_text(json.dumps(
            {"schema_version": 1, "id": "0001-nova", "name": "nova", "focus": HOSTILE,
             "strengths": [], "why": "more hands", "author": "opus",
             "requested_at": "2025-01-01T00:00:00Z", "status": "pending"}))
    (item,) = decisions.waiting_for_a_person()["items"]
    assert item["kind"] == "onboarding" and item["id"] == "0001-nova"
    assert HOSTILE in item["summary"]  # data, as written: escaping is the page's


# ---------------------------------------------------------------- the records

def test_proposals_debates_streams_and_quarantine_are_what_the_cli_shows(civ: Path) -> None:
    from click.testing import CliRunner

    from citizen.cli import cli

    pid = waiting(HOSTILE)
    by_state = decisions.proposals()
    assert [r["id"] for r in by_state["pending"]] == [pid]
    shown = decisions.proposal(pid)
    out = CliRunner().invoke(cli, ["proposal", "show", pid, "--json"])
    assert {k: v for k, v in shown.items() if k in json.loads(out.output)} \
        == json.loads(out.output)
    assert shown["awaits_person"] and shown["task"] == HOSTILE
    out = CliRunner().invoke(cli, ["proposal", "list", "--human", "--json"])
    assert [r["id"] for r in json.loads(out.output)] == [pid]

    d = civilization.debates().start(HOSTILE, ["opus", "mira"], "operator")
    (row,) = decisions.debates()
    assert row["id"] == d.id and row["topic"] == HOSTILE and row["owed_by"] == "opus"
    detail = decisions.debate(d.id)
    out = CliRunner().invoke(cli, ["debate", "show", d.id, "--json"])
    cli_view = json.loads(out.output)
    assert {k: detail[k] for k in cli_view} == cli_view
    assert [e["type"] for e in detail["events"]][:1] == ["debate_started"]

    streams = civilization.streams()
    sid = streams.open("<m1@example.org>", HOSTILE, participants=["opus", "mira"]).id
    streams.think(sid, "opus", True, 0.9, HOSTILE)
    streams.think(sid, "mira", False, 0.2, "not mine")
    streams.try_decide(sid, "opus")
    (srow,) = decisions.streams()
    assert srow["granted"] == ["opus"] and srow["text"] == HOSTILE
    assert decisions.rooms() == {"general": [srow]}
    out = CliRunner().invoke(cli, ["stream", "show", sid, "--json"])
    assert decisions.stream(sid) == json.loads(out.output)

    assert decisions.quarantine() == {"rows": [], "truncated": False, "unreadable": []}
    paths.broker_state().mkdir(mode=0o700, exist_ok=True)
    mailstate.state(paths.broker_state()).quarantine("opus", "<q@x>", HOSTILE, "a stranger",
                                                     HOSTILE)
    (q,) = decisions.quarantine()["rows"]
    assert (q["citizen"], q["from"], q["reason"]) == ("opus", HOSTILE, "a stranger")
    assert q["subject"] == decisions.subject_line(HOSTILE)  # the broker keeps it now


def test_a_subject_is_one_line_bounded_with_its_markup_kept_for_the_page_to_escape() -> None:
    assert decisions.subject_line(None) is None
    assert decisions.subject_line(HOSTILE) == "<script>alert(1)</script> ]0;x "
    assert decisions.subject_line("a\r\nb\u202ec") == "a  b c"
    long = decisions.subject_line("y" * 1000)
    assert long == "y" * (decisions.SUBJECT_CHARS - 1) + "\u2026"


# ---------------------------------------------------------------- money

def test_money_series_come_from_the_spend_ledgers_and_the_brokers(civ: Path) -> None:
    assert money.cost_by_citizen() == [] and money.refused() == {
        "series": [], "truncated": False, "unreadable": None}
    spend.record(paths.home("opus"), wake_type="WORK", cost_usd=0.25, tokens_in=100,
                 cache_read=300, cache_write=0, tokens_out=10)
    spend.record(paths.home("opus"), wake_type="REVIEW", cost_usd=0.05, tokens_in=100)
    spend.record(paths.home("mira"), wake_type="WORK", cost_usd=0.5, tokens_in=50)
    today = spend.today().isoformat()
    assert money.cost_by_citizen() == [
        {"day": today, "citizen": "mira", "usd": 0.5, "calls": 1},
        {"day": today, "citizen": "opus", "usd": 0.3, "calls": 2}]
    assert money.cost_by_wake_type() == [
        {"day": today, "wake_type": "REVIEW", "usd": 0.05, "calls": 1},
        {"day": today, "wake_type": "WORK", "usd": 0.75, "calls": 2}]
    opus = next(r for r in money.cached_share() if r["citizen"] == "opus")
    assert (opus["prompt_tokens"], opus["cached_share"]) == (500, 0.6)

    service.ledger_path().parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    ledger = Ledger(service.ledger_path())
    caps = Caps(citizen_day=0.1, citizen_month=10, civilization_day=10, civilization_month=10)
    ledger.reserve("opus", "m", 0.05, caps)
    with pytest.raises(CapExceeded):
        ledger.reserve("opus", "m", 0.5, caps)
    ledger.close()
    assert money.refused() == {"series": [{"day": today, "citizen": "opus", "refused": 1,
                                           "usd": 0.5}], "truncated": False,
                               "unreadable": None}


# ---------------------------------------------------------------- a person's decision

def test_approving_from_the_web_records_a_human_decision_and_lets_it_run(
        civ: Path, token: str) -> None:
    pid = waiting()
    done = decisions.record_human_decision(pid, True, HOSTILE, "alice", token)
    d = commons().load(pid)
    assert done["phase"] == d.phase == "execute"
    assert d.human is not None and (d.human["operator"], d.human["decision"],
                                    d.human["why"]) == ("alice", "approve", HOSTILE)
    assert any(p.name.endswith("CONSENSUS.json")
               for p in paths.home(d.owed_by).doorbell.iterdir())  # the executor is rung
    with pytest.raises(NotAllowed, match=r"already decided|nothing for a human"):
        decisions.record_human_decision(pid, True, "", "alice", token)


@pytest.mark.parametrize("offered", ["", "wrong", TOKEN + "x"])
def test_a_wrong_or_missing_token_is_refused_and_changes_nothing(
        civ: Path, token: str, offered: str) -> None:
    pid = waiting()
    with pytest.raises(NotAllowed, match="token is wrong or missing"):
        decisions.record_human_decision(pid, True, "yes", "alice", offered)
    d = commons().load(pid)
    assert (d.phase, d.human) == ("human", None)
    assert not list((commons().records_dir / pid).glob("human*"))


def test_the_same_rules_as_the_cli(civ: Path, token: str) -> None:
    pid = waiting()
    with pytest.raises(NotAllowed, match="needs a reason"):
        decisions.record_human_decision(pid, False, "  ", "alice", token)
    other = commons().request(HELLO, "mira", "operator").id  # at 'propose': nothing to approve
    with pytest.raises(NotAllowed, match="nothing for a human to approve"):
        decisions.record_human_decision(other, True, "", "alice", token)
    assert commons().load(pid).human is None


def _serve(web_uid: int, token_path: Path) -> tuple[socket.socket, threading.Thread]:
    """Root's helper on one end of a socket pair (systemd hands it the connection)."""
    ours, helpers = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def run() -> None:
        with helpers:
            helper.handle(helpers, web_uid=web_uid, token_path=token_path)

    thread = threading.Thread(target=run)
    thread.start()
    return ours, thread


def _ask(conn: socket.socket, pid: str, offered: str) -> dict[str, object]:
    with conn:
        conn.sendall(json.dumps({"action": "decide", "proposal": pid, "approve": True, "why": "ok",
                                 "operator": "alice", "token": offered}).encode() + b"\n")
        return dict(json.loads(conn.makefile("rb").readline()))


def test_roots_helper_records_only_for_the_web_user_with_the_token(
        civ: Path, token: str) -> None:
    """SO_PEERCRED decides who calls: a citizen's user (any uid but the web user's) is
    refused even with the right token; the web user without the token too."""
    pid = waiting()
    citizen_uid = os.getuid() + 1  # the helper serves only this uid as the web user
    conn, thread = _serve(citizen_uid, paths.web_token())
    answer = _ask(conn, pid, TOKEN)
    thread.join(10)
    assert answer["ok"] is False and "not the web service's user" in str(answer["error"])
    conn, thread = _serve(os.getuid(), paths.web_token())
    answer = _ask(conn, pid, "guess")
    thread.join(10)
    assert answer["ok"] is False and "token is wrong" in str(answer["error"])
    assert commons().load(pid).human is None
    conn, thread = _serve(os.getuid(), paths.web_token())
    answer = _ask(conn, pid, TOKEN)
    thread.join(10)
    assert answer == {"ok": True, "proposal": pid, "phase": "execute",
                      "note": answer["note"]}
    assert commons().load(pid).human is not None


def _presence(conn: socket.socket, offered: str, room: str = "general") -> dict[str, object]:
    with conn:
        conn.sendall(json.dumps({"action": "presence", "room": room, "present": True,
                                 "token": offered}).encode() + b"\n")
        return dict(json.loads(conn.makefile("rb").readline()))


def test_roots_helper_marks_presence_only_for_the_web_user_with_the_token(
        civ: Path, token: str) -> None:
    """The dashboard's presence goes through the same door as its approvals: a citizen's
    uid, a guessed token and a room name that is a path are refused and write nothing."""
    rooms = civilization.streams()
    conn, thread = _serve(os.getuid() + 1, paths.web_token())  # a citizen's user calls
    answer = _presence(conn, TOKEN)
    thread.join(10)
    assert answer["ok"] is False and "not the web service's user" in str(answer["error"])
    for offered, room, refusal in (("guess", "general", "token is wrong"),
                                   (TOKEN, "../../etc", "room names are")):
        conn, thread = _serve(os.getuid(), paths.web_token())
        answer = _presence(conn, offered, room)
        thread.join(10)
        assert answer["ok"] is False and refusal in str(answer["error"]), answer
    assert rooms.room("general").get("present") is None
    conn, thread = _serve(os.getuid(), paths.web_token())
    answer = _presence(conn, TOKEN)
    thread.join(10)
    assert answer["ok"] is True and answer["present"] is True
    assert rooms.room("general")["present"] is True
