"""A debate whose participants live on two servers (shared/debates/store.py over
shared/remote.py): each citizen's process asks only its own server's broker, the moves
are records in the civilization's database, and the debate ends with one crux both see.
Two brokers on one Debian PostgreSQL (tests/several.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from citizen.config import paths
from shared.debates import Debates
from shared.debates.rules import Debate
from shared.errors import LockTimeout, NotAllowed
from tests.debating import play
from tests.several import SERVERS, Site

PEOPLE = ["opus", "mira", "aria"]  # opus and aria on server a, mira on b


def seat(sites: dict[str, Site]) -> dict[str, Debates]:
    """Each participant's own view of the debates, through its own server's broker; its
    shared folder is never written (asserted below)."""
    home = {c: s for s, cs in SERVERS.items() for c in cs}
    return {c: Debates(paths.shared_dir(), PEOPLE, enforce_identity=False,
                       remote=sites[home[c]].as_citizen(c)) for c in PEOPLE}


def test_a_debate_runs_to_its_crux_with_participants_on_two_servers(
        sites: dict[str, Site]) -> None:
    by = seat(sites)
    before = sorted(p for p in paths.shared_dir().rglob("*"))
    did = by["mira"].start("Should every change ship with tests first?", PEOPLE, "mira").id
    d = by["opus"].load(did)
    for _ in range(300):
        if not d.active:
            break
        who = d.owed_by()
        assert [x.id for x in by[who].owed(who)] == [did]  # each server sees its turn
        d = by[who].move(did, who, play(d.situation(who)))
    assert not d.active
    for c in PEOPLE:  # one crux, one transcript, the same everywhere
        assert by[c].result(did) == d.crux() and by[c].transcript(did) == d.transcript()
        assert by[c].owed(c) == []
    moves = by["aria"].moves(did)
    assert {m["author"] for m in moves} == set(PEOPLE) and len(moves) == d.seq
    kinds = [e["type"] for e in by["opus"].events(did)]
    assert kinds[0] == "debate_started" and "debate_complete" in kinds
    posted = [e["author"] for e in by["mira"].events(did) if e["type"] == "message_posted"]
    assert set(posted) == set(PEOPLE)  # an event's author is its mover, not its logger
    assert sorted(p for p in paths.shared_dir().rglob("*")) == before  # no file here


def test_a_move_is_its_authors_and_taken_once(sites: dict[str, Site]) -> None:
    by = seat(sites)
    did = by["opus"].start("Should reviews be drawn at random?", PEOPLE, "opus").id
    d = by["opus"].load(did)
    with pytest.raises(NotAllowed, match="cannot write a record in opus's name"):
        by["mira"].move(did, "opus", play(d.situation("opus")))
    d = by["opus"].move(did, "opus", play(d.situation("opus")))
    name = by["opus"].threads.names(did, "moves/*.json")[0]
    with pytest.raises(NotAllowed, match="already recorded"):
        by["opus"].threads.write(did, name, "opus", {"move": "CLAIM"})
    assert by["mira"].load(did).seq == d.seq == 1


def test_a_peer_squatting_the_next_moves_name_blocks_nobody(sites: dict[str, Site]) -> None:
    """The attack: opus (server a) writes his row at the name mira's next move will have
    - before she moves. It is his, not hers: ignored by every reader, and her move is
    still hers to write (each author's records are its own namespace)."""
    by = seat(sites)
    did = by["opus"].start("Should gates run hourly?", PEOPLE, "opus").id
    d = by["opus"].move(did, "opus", play(by["opus"].load(did).situation("opus")))
    assert d.owed_by() == "mira"
    squat = by["opus"].threads.key(by["opus"].threads.dir(did) / f"moves/{d.seq + 1:04d}-mira.json")
    by["opus"].remote.create(squat, {**play(d.situation("mira")), "seq": d.seq + 1})  # type: ignore[union-attr]
    assert by["aria"].load(did).seq == 1  # the squat counts for nothing
    d = by["mira"].move(did, "mira", play(by["mira"].load(did).situation("mira")))
    assert d.seq == 2 and by["aria"].moves(did)[1]["author"] == "mira"


def test_one_writer_at_a_time_across_servers(sites: dict[str, Site]) -> None:
    """The lease is the flock's stand-in: while mira (server b) holds a debate's, opus
    (server a) waits; it frees itself when its holder's time is up."""
    by = seat(sites)
    did = by["opus"].start("Should the baseline be fetched hourly?", PEOPLE, "opus").id
    key = by["mira"]._key(did, "lock")
    mira, opus = (sites[s].as_citizen(c) for s, c in (("b", "mira"), ("a", "opus")))
    got = threading.Event()
    with mira.lease(key, 30):
        def take() -> None:
            with opus.lease(key, 30):
                got.set()

        t = threading.Thread(target=take)
        t.start()
        assert not got.wait(0.5)  # held elsewhere: not taken
    t.join(30)
    assert got.is_set()
    with mira.lease(key, 1), pytest.raises(LockTimeout, match="held by another"), \
            opus.lease(key, 0.2):
        pass


def test_a_server_of_its_own_keeps_its_debates_in_files(tmp_path: Path) -> None:
    debates = Debates(tmp_path / "shared", PEOPLE, enforce_identity=False)
    d: Debate = debates.start("Should tests run in parallel?", PEOPLE, "opus")
    assert (tmp_path / "shared" / "debates" / d.id / "thread.json").is_file()
