"""A Thought World proposal whose participants live on two servers (shared/consensus/ over
shared/remote.py): each citizen's process asks only its own server's broker; the
proposal's records, its view, its task's workspace, the episodes, decisions, patterns
and weight history are the civilization's, and every participant sees one state. Two
brokers on one Debian PostgreSQL (tests/several.py).

The world repository is the broker's (its remote is citizen/broker/remote.py's): here
one directory outside the commons that every participant's Consensus acts on."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from citizen.broker import world
from citizen.config import paths
from shared.consensus import Consensus, diversity, render
from shared.consensus.values import load_framework
from shared.consensus.world import World
from shared.errors import LockTimeout, NotAllowed
from shared.remote import RemoteRefused
from tests.several import SERVERS, Site
from tests.thoughtworld import HELLO, PROFILES, proposal, vote

PEOPLE = ("opus", "mira", "aria")  # opus and aria on server a, mira on b
HOME = {c: s for s, cs in SERVERS.items() for c in cs}


def seat(sites: dict[str, Site], world: Path) -> dict[str, Consensus]:
    """Each participant's own Consensus, through its own server's broker."""
    framework = load_framework(paths.templates_dir() / "values.yaml")
    out = {}
    for c in PEOPLE:
        out[c] = Consensus(paths.shared_dir(), framework, PROFILES, PEOPLE,
                           enforce_identity=False, remote=sites[HOME[c]].as_citizen(c))
        out[c].world = World(world)
    return out


def files(top: Path) -> list[Path]:
    return sorted(top.rglob("*")) if top.exists() else []


def test_a_proposal_runs_to_its_decision_with_participants_on_two_servers(
        sites: dict[str, Site], tmp_path: Path) -> None:
    by = seat(sites, tmp_path / "far")
    before = files(paths.shared_dir())
    d = by["opus"].request(HELLO, "opus", "operator")
    pid, roles = d.id, d.roles
    v, i = roles["verifier"], roles["integrator"]
    assert roles["executor"] == "opus" and {v, i} == {"mira", "aria"}
    by["opus"].propose(pid, "opus", proposal(note="hello.md may exist: check first"))
    assert [x.id for x in by[v].owed(v)] == [pid]  # mira's server or aria's: its turn
    assert by["opus"].owed("opus") == [] and by[i].owed(i) == []
    by[v].verify(pid, v, vote("approve_with_concerns", "does hello.md exist already?"))
    d = by[i].integrate(pid, i, vote("approve"))
    assert d.consensus is not None and d.consensus["reached"] and d.phase == "execute"
    assert [x.id for x in by["opus"].owed("opus")] == [pid]
    by["opus"].execute(pid, "opus")
    by[v].check(pid, v, {"outcomes_verified": True, "rationale": "hello.md holds it"})
    before_w = by[v].weights.current("opus")["exploration"]
    d = by[i].record(pid, i, {
        "key_learnings": ["one round suffices for a greeting"],
        "patterns": ["check a file's existence before writing it"],
        "weight_adjustments": [{"citizen": "opus", "value": "exploration", "delta": -0.1,
                                "reason": "it wrote without looking first"}]})
    assert d.phase == "done" and d.result == "approved"
    ep = "ep-" + pid.removeprefix("prop-")
    task = by["opus"].task_of(pid)
    for c in PEOPLE:  # one state, the same on both servers
        seen = by[c].load(pid)
        assert render(seen) == render(d) and by[c].owed(c) == []
        assert by[c].view_locations(pid) == ["approved"]
        assert [(x["id"], x["status"]) for x in by[c].views()] == [(pid, "approved")]
        assert [e["id"] for e in by[c].episodes.all()] == [ep]
        assert [h["proposal"] for h in by[c].episodes.history()] == [pid]
        assert by[c].patterns.relevant("existence") == [
            {"pattern": "check a file's existence before writing it", "episode": ep}]
        assert by[c].weights.current("opus")["exploration"] == pytest.approx(before_w - 0.1)
        brief = by[c].workspace.brief(task)
        assert HELLO in brief["context_md"]
        assert [n["author"] for n in brief["notes"]] == ["opus"]
        assert [(a["proposal"], a["success"]) for a in brief["artifacts"]] == [(pid, True)]
    assert (tmp_path / "far" / "world" / "hello.md").read_text() == "Hello, thought world!"
    assert files(paths.shared_dir()) == before  # nothing written in the local commons


def test_a_step_is_its_authors_wherever_it_is_written(
        sites: dict[str, Site], tmp_path: Path) -> None:
    by = seat(sites, tmp_path / "far")
    pid = by["opus"].request(HELLO, "opus", "operator").id
    with pytest.raises(NotAllowed, match="cannot write a record in opus's name"):
        by["mira"].propose(pid, "opus", proposal())  # mira, on b, as opus
    posing = Consensus(paths.shared_dir(), by["opus"].framework, PROFILES, PEOPLE,
                       enforce_identity=False, remote=sites["b"].as_citizen("opus"))
    with pytest.raises(RemoteRefused) as refused:  # b's broker speaking for a's citizen
        posing.propose(pid, "opus", proposal())
    assert refused.value.status == 403
    d = by["opus"].propose(pid, "opus", proposal())
    with pytest.raises(NotAllowed, match="already recorded"):
        by["opus"].threads.write(pid, "proposal-01.json", "opus", proposal("evil.md"))
    # A note whose words name another is its writer's: the author is the broker's word.
    task = by["opus"].task_of(pid)
    sites["b"].as_citizen("mira").create(f"workspace/{task}/notes/planted.json",
                                         {"note": "approve it", "author": "opus"})
    assert [n["author"] for n in by["aria"].workspace.notes(task)] == ["mira"]
    assert by["mira"].load(pid).phase == d.phase == "verify"


def test_the_weight_historys_one_writer_is_a_lease_across_servers(
        sites: dict[str, Site], tmp_path: Path) -> None:
    """diversity.enforce's check-then-write: while mira (b) holds it, opus (a) waits."""
    by = seat(sites, tmp_path / "far")
    got = threading.Event()
    with by["mira"].weights.lock(30):
        def take() -> None:
            with by["opus"].weights.lock(30):
                got.set()

        t = threading.Thread(target=take)
        t.start()
        assert not got.wait(0.5)  # held on the other server: not taken
    t.join(30)
    assert got.is_set()
    with by["mira"].weights.lock(1), pytest.raises(LockTimeout, match="held by another"), \
            by["opus"].weights.lock(0.2):
        pass


def test_a_server_of_its_own_keeps_its_proposals_in_files(tmp_path: Path) -> None:
    framework = load_framework(paths.templates_dir() / "values.yaml")
    c = Consensus(tmp_path / "shared", framework, PROFILES, PEOPLE, enforce_identity=False)
    d = c.request(HELLO, "opus", "operator")
    c.propose(d.id, "opus", proposal(note="a note"))
    assert (tmp_path / "shared" / "proposals" / "records" / d.id / "proposal-01.json").is_file()
    assert c.view_locations(d.id) == ["pending"]
    assert len(list((tmp_path / "shared" / "workspace" / d.id / "notes").glob("*.json"))) == 1


def test_the_days_diversity_steps_are_made_once_for_the_whole_civilization(
        sites: dict[str, Site], tmp_path: Path) -> None:
    """diversity.enforce from a server's scheduler, then from the other's: one day's steps
    once, and both servers' citizens weigh with them."""
    by = seat(sites, tmp_path / "far")
    for c in PEOPLE:  # the converging steps below stand for real episodes' (no proposals)
        by[c].weights.vouch = None
    # autonomy starts at opus 0.6, mira 0.7, aria 0.5; two servers' episodes pull it together
    by["aria"].weights.adjust("mira", "autonomy", -0.1, episodes=["ep-1"], approved_by="aria",
                              reason="r")
    by["mira"].weights.adjust("aria", "autonomy", 0.1, episodes=["ep-2"], approved_by="mira",
                              reason="r")
    assert by["opus"].weights.diversity(PEOPLE)["autonomy"] == 0.0
    made = diversity.enforce(by["mira"].weights, PEOPLE, "2026-11-29", 0.15)
    assert {line["value"] for line in made} == {"autonomy"}
    assert diversity.enforce(by["opus"].weights, PEOPLE, "2026-11-29", 0.15) == []
    assert {c: by["opus"].weights.current(c) for c in PEOPLE} == \
        {c: by["mira"].weights.current(c) for c in PEOPLE}


def test_a_justification_copied_from_an_older_proposal_is_flagged_on_every_server(
        sites: dict[str, Site], tmp_path: Path) -> None:
    """The gaming check's memory of every proposal's justifications (justifications.py)
    reads the civilization's threads: a copy is flagged whichever server looks."""
    by = seat(sites, tmp_path / "far")
    # Chosen ids: "older" is the id's order, and two opened in one second draw theirs.
    first = by["opus"].request(HELLO, "opus", "operator", pid="prop-20260101T000000-0001").id
    by["opus"].propose(first, "opus", proposal())
    by["opus"].load(first)  # the index is read, and kept, before the copy
    copy = by["opus"].request("Write hello.md again", "opus", "operator",
                              pid="prop-20260101T000001-0002").id
    by["opus"].propose(copy, "opus", proposal())
    for c in PEOPLE:
        assert f"justification for truth repeated from {first}" in by[c].load(copy).flags
        assert by[c].load(first).flags == []


def test_a_peers_row_in_a_proposals_thread_is_not_its_justification(
        sites: dict[str, Site], tmp_path: Path) -> None:
    """Each author writes in a namespace of its own: mira's row planted at opus's
    proposal-01.json, first there, neither stands for opus's revision in the gaming
    check's index nor hides it (a later copy of opus's words is still flagged)."""
    by = seat(sites, tmp_path / "far")
    ids = [f"prop-20260101T00000{n}-000{n}" for n in (1, 2)]
    for pid in ids:
        by["opus"].request(HELLO, "opus", "operator", pid=pid)
    sites["b"].as_citizen("mira").create(f"proposals/records/{ids[0]}/proposal-01.json",
                                         {"value_justification": {"truth": "planted words"}})
    by["opus"].propose(ids[0], "opus", proposal("other.md", "Other text"))
    d = by["opus"].propose(ids[1], "opus", proposal("other.md", "Other text"))
    assert f"justification for truth repeated from {ids[0]}" in d.flags
    assert by["mira"].load(ids[0]).revisions[0]["author"] == "opus"


def test_the_brokers_world_step_reads_the_proposal_from_the_civilization(
        sites: dict[str, Site], tmp_path: Path) -> None:
    """The broker executes an approved proposal's actions for its executor
    (citizen/broker/world.py): on several servers it reads the proposal's records from
    the civilization's database, through its own pool - on this server's files alone it
    answered NotFound for a proposal opened on another server."""
    by = seat(sites, tmp_path / "far")
    d = by["mira"].request(HELLO, "mira", "operator")  # opened on server b
    for s in ("a", "b"):
        seen = world.consensus(sites[s].broker, "opus").load(d.id)
        assert (seen.id, seen.phase, seen.roles) == (d.id, d.phase, d.roles)
