"""The commons of a civilization on several servers, through each server's broker
(citizen/broker/commons.py, citizen/access/commons.py, citizen/broker/rings.py), against
Debian's PostgreSQL (tests/postgres.py): two servers' brokers on one database, each on its
own socket, each with its own database role."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from citizen import config
from citizen.access.commons import BrokerCommons, CommonsRefused
from citizen.admin import founding
from citizen.broker import commons, holds
from citizen.broker.gateway import Gateway
from citizen.broker.ledger import Ledger
from citizen.broker.refused import Refused
from citizen.broker.rings import Listener, Rings
from citizen.broker.server import Broker
from citizen.cli import cli
from citizen.config import paths
from shared import doorbell
from shared.commons import Commons
from tests.several import Site


def test_a_record_is_its_authors_once_and_every_server_reads_it(
        sites: dict[str, Site]) -> None:
    opus, mira = sites["a"].as_citizen("opus"), sites["b"].as_citizen("mira")
    opus.create("debates/d1/thread.json", {"topic": "t", "author": "mira"})  # says mira
    got = mira.read("debates/d1/thread.json")
    assert got is not None and got["author"] == "opus" and got["data"]["author"] == "opus"
    with pytest.raises(CommonsRefused, match="already recorded by opus") as taken:
        opus.create("debates/d1/thread.json", {"topic": "again"})  # a step is taken once
    assert taken.value.status == 409
    mira.create("debates/d1/thread.json", {"topic": "mine"})  # her own row there ...
    first = opus.read("debates/d1/thread.json")  # ... and the first written is still his
    assert first is not None and first["data"]["topic"] == "t"
    mira.write("debates/d1/moves/mira.json", {"move": "claim"})
    mira.write("debates/d1/moves/mira.json", {"move": "claim, again"})  # her own: rewritten
    opus.write("debates/d1/moves/mira.json", {"move": "forged"})  # his own row, not hers
    got = opus.read("debates/d1/moves/mira.json", "mira")
    assert got is not None and got["data"]["move"] == "claim, again"
    assert [(r["author"], r["data"]["move"]) for r in opus.records("debates/d1/moves")] == [
        ("mira", "claim, again"), ("opus", "forged")]
    assert mira.read("debates/d1/nothing.json", "mira") is None
    assert opus.folders("debates") == ["d1"] and mira.folders("") == ["debates"]
    assert opus.read("debates/d1/none.json") is None


def test_a_brokers_code_cannot_author_another_servers_citizen(
        sites: dict[str, Site]) -> None:
    """What a changed broker of server a would do - call the route as b's citizen -
    the database refuses: authorship across servers is held by a's role, not a's code."""
    body = json.dumps({"key": "changes/c1/proposal.json", "data": {}}).encode()
    with pytest.raises(Refused, match="refuses this server's role") as refused:
        commons.create(sites["a"].broker, "mira", body)
    assert refused.value.status == 403
    assert sites["b"].as_citizen("mira").read("changes/c1/proposal.json") is None
    commons.create(sites["b"].broker, "mira", body)  # her own server's broker may


@pytest.mark.parametrize("key", ["../x", "a//b", "/abs", "a/./b", "a/..", "", "a b/c",
                                 "a/" * 9 + "b"])
def test_a_key_is_a_plain_relative_place(sites: dict[str, Site], key: str) -> None:
    with pytest.raises(CommonsRefused, match="relative path") as bad:
        sites["a"].as_citizen("opus").create(key, {})
    assert bad.value.status == 400


def test_documents_lose_no_update_when_two_servers_race(sites: dict[str, Site]) -> None:
    """8 writers (4 a server) each add 1 to one counter 15 times through their brokers:
    every increment is there, each update one try (they wait their turn for the row)."""
    tries = [0]

    def bump(d: dict[str, int]) -> None:
        tries[0] += 1
        d["n"] = d.get("n", 0) + 1

    def count(c: BrokerCommons, n: int) -> None:
        for _ in range(n):
            c.update("rooms/r1/heat.json", dict, bump)

    writers = [threading.Thread(target=count, args=(sites[s].as_citizen(c), 15))
               for s, c in (("a", "opus"), ("a", "aria"), ("b", "mira"), ("b", "mira"))
               for _ in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    data, version = sites["a"].as_citizen("aria").document("rooms/r1/heat.json", dict)
    assert data == {"n": 120} and version == 120 and tries[0] == 120


def test_a_held_document_keeps_others_waiting_and_a_stalled_holder_is_rolled_back(
        sites: dict[str, Site], monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: hold a document and never put it. Others wait their turn, never lose
    their update, and the stalled hold is rolled back after HOLD_S (shortened here)."""
    monkeypatch.setattr(holds, "HOLD_S", 1.0)
    opus, mira = sites["a"].as_citizen("opus"), sites["b"].as_citizen("mira")
    monkeypatch.setattr(holds, "WAIT_S", 0.5)
    held = opus.call("document/hold", {"key": "rooms/r3/heat.json"})
    with pytest.raises(CommonsRefused, match="opus held another document") as twice:
        opus.call("document/hold", {"key": "rooms/r4/heat.json"})  # one at a time
    assert twice.value.status == 503
    monkeypatch.setattr(holds, "WAIT_S", 60.0)
    done = threading.Event()

    def other() -> None:
        mira.update("rooms/r3/heat.json", dict, lambda d: d.__setitem__("by", "mira"))
        done.set()

    # mira is on another server: her broker's connection waits for the row in PostgreSQL
    # until opus's broker rolls the stalled hold back.
    t = threading.Thread(target=other)
    t.start()
    assert done.wait(60)
    t.join(10)
    with pytest.raises(CommonsRefused, match="rolled back") as late:
        opus.call("document/put", {"token": held["token"], "data": {"by": "opus"}})
    assert late.value.status == 409
    assert opus.document("rooms/r3/heat.json", dict) == ({"by": "mira"}, 1)
    opus.update("rooms/r4/heat.json", dict, lambda d: d.__setitem__("n", 1))  # free again


def test_a_failed_change_gives_the_document_back(sites: dict[str, Site]) -> None:
    opus = sites["a"].as_citizen("opus")
    opus.update("rooms/r5/heat.json", dict, lambda d: d.__setitem__("n", 1))

    def broken(d: dict[str, int]) -> None:
        d["n"] = 99
        raise ValueError("the change failed")

    with pytest.raises(ValueError, match="the change failed"):
        opus.update("rooms/r5/heat.json", dict, broken)
    assert opus.document("rooms/r5/heat.json", dict) == ({"n": 1}, 1)
    opus.update("rooms/r5/heat.json", dict, lambda d: d.__setitem__("n", 2))


def test_a_ring_reaches_the_server_its_citizen_lives_on_only(
        sites: dict[str, Site]) -> None:
    heard = {s: Rings() for s in sites}
    lived = {"a": {"opus", "aria"}, "b": {"mira"}}
    listeners = [Listener(sites[s].dsn, lived[s].__contains__, heard[s]) for s in sites]
    for listener in listeners:
        listener.start()
    try:
        for listener in listeners:
            assert listener.listening.wait(30)
        where = sites["a"].as_citizen("opus").ring("mira", "debate", "your turn in d1")
        assert where == "b"
        got = heard["b"].take(timeout=30)
        assert [(r.citizen, r.wake_type, r.reason, r.sender) for r in got] == [
            ("mira", "debate", "your turn in d1", "opus")]
        assert heard["a"].take(timeout=0) == []
        with pytest.raises(CommonsRefused, match="no citizen ghost"):
            sites["a"].as_citizen("opus").ring("ghost", "debate", "")
    finally:
        for listener in listeners:
            listener.close()


def test_the_scheduler_asks_its_broker_for_the_rings_of_its_citizens(
        sites: dict[str, Site]) -> None:
    """b's scheduler's long poll (GET /v1/experience/views/rings): answered to root, the
    scheduler's user and (dev mode) the broker's own user only - a citizen's uid would
    learn who rings whom."""
    b = sites["b"].broker
    b.rings = Rings()
    listener = Listener(sites["b"].dsn, "mira".__eq__, b.rings)
    listener.start()
    try:
        assert listener.listening.wait(30)
        sites["a"].as_citizen("aria").ring("mira", "debate", "d2")
        status, answer = commons.rings_view(b, os.geteuid(), "wait=30")
        assert status == 200 and answer == {"rings": [
            {"citizen": "mira", "wake_type": "debate", "reason": "d2", "sender": "aria"}]}
        assert commons.rings_view(b, os.geteuid(), "wait=0") == (200, {"rings": []})
        with pytest.raises(Refused, match="scheduler") as other:
            commons.rings_view(b, os.geteuid() + 4242, "")
        assert other.value.status == 403
        with pytest.raises(Refused, match="wait="):
            commons.rings_view(b, os.geteuid(), "wait=3600")
    finally:
        listener.close()


def test_every_server_sees_every_citizen_and_where_it_lives(sites: dict[str, Site]) -> None:
    assert sites["b"].as_citizen("mira").citizens() == {"mira": "b", "aria": "a", "opus": "a"}


def test_a_server_of_its_own_has_no_database_commons(tmp_path: Path) -> None:
    founding.init(["opus"])
    b = Broker(Ledger(tmp_path / "ledger.db"), server_mode=False)
    try:
        with pytest.raises(Refused, match="its own files") as own:
            commons.read(b, "opus", b'{"key": "a/b.json"}')
        assert own.value.status == 404
    finally:
        b.ledger.close()


def test_the_commons_rings_a_citizen_of_another_server_through_its_broker(
        sites: dict[str, Site]) -> None:
    """Commons.ring on one of several servers: a citizen whose doorbell is here gets the
    file, as always; one living elsewhere is rung through the broker's NOTIFY."""
    heard = Rings()
    listener = Listener(sites["b"].dsn, "mira".__eq__, heard)
    listener.start()
    try:
        assert listener.listening.wait(30)
        c = Commons(paths.shared_dir(), ["opus", "aria", "mira"], False,
                    config.templates().dir / "values.yaml", remote=sites["a"].as_citizen("opus"))
        (paths.shared_dir() / "doorbell" / "mira").rmdir()  # mira's home is on server b
        assert c.ring("mira", "debate", "your turn", sender="opus")
        assert [(r.citizen, r.sender) for r in heard.take(timeout=30)] == [("mira", "opus")]
        assert c.ring("aria", "debate", "yours too", sender="opus")
        assert [r.reason for r in doorbell.drain(c.doorbell_dir("aria"))] == ["yours too"]
        assert heard.take(timeout=0) == []
    finally:
        listener.close()


def test_citizen_status_shows_every_servers_citizens_and_where_each_lives(
        sites: dict[str, Site], rules_dir: Path) -> None:
    """On server a (civilization.json), `citizen status` shows its own citizens' rows with
    a SERVER column, mira as living on b, and when each server was last heard from."""
    (rules_dir / "civilization.json").write_text(json.dumps(
        {"server": "a", "database": sites["a"].dsn}))
    (paths.civ_root() / "mira").rename(paths.civ_root() / ".mira-elsewhere")  # on b
    got = CliRunner().invoke(cli, ["status", "--json"])
    assert got.exit_code == 0, got.output
    assert {(r["citizen"], r["server"], r.get("elsewhere", False))
            for r in json.loads(got.output)} == {("opus", "a", False), ("aria", "a", False),
                                                 ("mira", "b", True)}
    table = CliRunner().invoke(cli, ["status"])
    assert table.exit_code == 0, table.output
    assert "SERVER" in table.output and "on b" in table.output
    assert "servers: a (2 citizens, heard never), b (1 citizens, heard never)" in table.output


@pytest.mark.parametrize("key", ["draws/ch-20261129T100000-opus-1a2b.json",
                                 "merged/ch-20261129T100000-opus-1a2b.json"])
def test_a_citizen_cannot_file_what_only_a_broker_files(sites: dict[str, Site],
                                                        key: str) -> None:
    """The attack: opus files the draw of his own change first (picking his reviewers),
    or a merge record for a commit no review passed. His route refuses both folders; the
    broker's own step (citizen.broker.gateway) files there."""
    opus = sites["a"].as_citizen("opus")
    for step in (opus.create, opus.write):
        with pytest.raises(CommonsRefused, match="only a broker files") as refused:
            step(key, {"reviewers": ["aria"]})
        assert refused.value.status == 403
    assert opus.read(key) is None
    Gateway(sites["a"].broker, "opus").create(key, {"reviewers": ["mira", "aria"]})
    got = opus.read(key)
    assert got is not None and got["data"]["reviewers"] == ["mira", "aria"]


def test_a_listing_longer_than_a_page_comes_whole(sites: dict[str, Site],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder past one answer's LIST_MAX (a civilization's merge records after
    thousands of merges) is listed whole, page by page - none missed."""
    monkeypatch.setattr(commons, "LIST_MAX", 3)
    opus, mira = sites["a"].as_citizen("opus"), sites["b"].as_citizen("mira")
    for i in range(5):
        opus.create(f"notes/n{i}.json", {"i": i})
    mira.create("notes/n2.json", {"i": 2})  # two authors at one key, across a page's edge
    got = [(r["key"], r["author"]) for r in mira.records("notes")]
    assert got == sorted([(f"notes/n{i}.json", "opus") for i in range(5)]
                         + [("notes/n2.json", "mira")])
    assert len(Gateway(sites["a"].broker, "opus").records("notes")) == 6


def test_a_page_is_cut_by_its_bytes_too(sites: dict[str, Site],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Records of near a megabyte (a change's bundle) are listed a few a page: an answer
    never outgrows what the citizen's side reads, and none is lost between pages."""
    monkeypatch.setattr(commons, "PAGE_BYTES", 3000)
    opus = sites["a"].as_citizen("opus")
    for i in range(4):
        opus.create(f"big/b{i}.json", {"blob": "x" * 1200})
    first = opus.call("record/list", {"folder": "big"})
    assert len(first["records"]) == 2 and first["more"]
    assert [r["key"] for r in opus.records("big")] == [f"big/b{i}.json" for i in range(4)]
