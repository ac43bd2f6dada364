"""The first milestone: three citizen daemons create a file in a git repository by
consensus - proposal, a concern, unanimous medium-stakes approval, execution, outcome
check, commit, episode - started by `citizen consensus start`, moved by doorbells."""

from __future__ import annotations

import json
from pathlib import Path

import git

from citizen import civilization, config
from tests.anthropic_server import MessagesServer
from tests.daemons import cli, daemon_env, start, wait_for
from tests.thoughtworld import CITIZENS, HELLO, scripted_council


def test_three_daemons_reach_consensus_and_commit(civ: Path,
                                                  messages_api: MessagesServer) -> None:
    messages_api.responder = scripted_council
    env = daemon_env(civ, messages_api)
    procs = [start(env, name, "--interval", "3600", "--first-wake", "3600")
             for name in CITIZENS]
    try:
        out = cli(env, "consensus", "start", "--by", "opus", HELLO)
        pid = out.split()[1].rstrip(":")
        view = civ / "shared" / "proposals" / "approved" / f"{pid}.json"
        wait_for(view.exists, timeout=120, every=0.2)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=60)
    data = json.loads(view.read_text())
    # every step's reasoning is in the proposal JSON
    assert data["stakes"] == "medium" and data["consensus"]["threshold"] == "unanimous"
    assert data["consensus"]["approvals"] == 3 and data["consensus"]["reached"]
    assert data["votes"]["verifier"]["concerns"], "the verifier raised a concern"
    assert data["votes"]["verifier"]["rationale"] and data["votes"]["integrator"]["rationale"]
    assert data["value_justification"] and data["expected_outcomes"]
    assert data["execution"]["success"] and data["outcome"]["outcomes_verified"]
    assert all(c["met"] for c in data["outcome"]["mechanical"])
    world = civ / "shared" / "world"
    assert (world / "hello.md").read_text() == "Hello, thought world!"
    head = git.Repo(world).head.commit
    assert head.hexsha == data["execution"]["commit"] and head.author.name == "opus"
    assert pid in head.message and "hello.md" in head.stats.files
    commons = civilization.consensus(config.templates())
    (episode,) = commons.episodes.all()
    assert episode["proposal"] == pid and episode["outcome"] == "approved"
    assert episode["key_learnings"] and data["episode"] == episode["id"]
    # it moved by doorbells: each citizen's CONSENSUS wake took only its own steps
    steps = {name: [e["step"] for log in (civ / name / "logs" / "wakes").glob("*-CONSENSUS.jsonl")
                    for e in map(json.loads, log.read_text().splitlines())
                    if e.get("event") == "consensus_step"] for name in CITIZENS}
    roles = data["roles"]
    assert sorted(steps[roles["executor"]]) == ["execute", "propose"]
    assert sorted(steps[roles["verifier"]]) == ["check", "verify"]
    assert sorted(steps[roles["integrator"]]) == ["integrate", "record"]
    # what the operator sees
    shown = cli(env, "proposal", "show", pid)
    assert "approved, at done" in shown and "concern:" in shown
    listed = json.loads(cli(env, "proposals", "--json"))
    assert [r["id"] for r in listed] == [pid]
    report = json.loads(cli(env, "consensus", "report", "--json"))
    assert report["decided"] == 1 and report["approved"] == 1
    assert report["dissent_rate"] == 1.0 and report["emergent_solutions_rate"] == 0.0
    assert report["rounds_per_proposal_by_stakes"] == {"medium": 1.0}
    assert set(report["weight_diversity_sigma"]) == set(commons.framework.base_values)
