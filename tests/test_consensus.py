"""The consensus protocol over the commons: lifecycle, ladder, human gate, records, values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import pytest

from shared.consensus import MAX_ROUNDS, Consensus, rotation
from shared.consensus import episodes as episodes_mod
from shared.consensus.gaming import flags
from shared.consensus.rules import Proposal
from shared.errors import Invalid, NotAllowed
from tests.thoughtworld import HELLO, commons, env, proposal, vote


@pytest.fixture
def c(tmp_path: Path) -> Consensus:
    return commons(tmp_path / "shared")


def opened(c: Consensus, body: dict[str, Any] | None = None) -> tuple[str, dict[str, str]]:
    d = c.request(HELLO, "opus", "operator")
    c.propose(d.id, "opus", body or proposal())
    return d.id, d.roles


def test_the_whole_lifecycle_commits_and_records_an_episode(c: Consensus) -> None:
    pid, roles = opened(c)
    assert c.load(pid).phase == "verify" and c.view_locations(pid) == ["pending"]
    c.verify(pid, roles["verifier"], vote("approve_with_concerns", "does it exist already?"))
    d = c.integrate(pid, roles["integrator"], vote("approve"))
    assert d.consensus is not None
    assert d.consensus["reached"] and d.consensus["threshold"] == "unanimous"
    assert d.stakes == "medium" and d.phase == "execute"
    d = c.execute(pid, "opus", env())
    assert (c.world.dir / "hello.md").read_text() == "Hello, thought world!"
    head = git.Repo(c.world.dir).head.commit
    assert d.execution is not None
    assert head.hexsha == d.execution["commit"] and pid in head.message
    assert head.author.name == "opus"
    d = c.check(pid, roles["verifier"], {"outcomes_verified": True, "rationale": "ok"})
    assert d.phase == "record"
    d = c.record(pid, roles["integrator"], {"key_learnings": ["one round suffices"]})
    assert d.phase == "done" and d.result == "approved"
    assert c.view_locations(pid) == ["approved"]
    view = json.loads((c.dir / "approved" / f"{pid}.json").read_text())
    assert view["votes"]["verifier"]["concerns"] == ["does it exist already?"]
    assert view["execution"]["success"] and view["outcome"]["outcomes_verified"]
    (episode,) = c.episodes.all()
    assert episode["outcome"] == "approved" and episode["commit"] == head.hexsha
    assert c.episodes.history()[0]["consensus"]["result"] == "approved"


def test_roles_never_give_a_citizen_its_own_proposal(c: Consensus) -> None:
    for i in range(30):
        roles = rotation(f"prop-2026-{i:04x}", "mira", ["opus", "mira", "aria", "zed"])
        assert len(set(roles.values())) == 3 and roles["executor"] == "mira"
    with pytest.raises(Invalid, match="two citizens besides"):
        rotation("prop-x", "opus", ["opus", "mira"])


def test_steps_out_of_turn_or_twice_are_refused(c: Consensus) -> None:
    pid, roles = opened(c)
    with pytest.raises(NotAllowed, match=r"verify step is (mira|aria)"):
        c.verify(pid, "opus", vote())  # the proposer verifying itself
    with pytest.raises(NotAllowed, match="at 'verify'"):
        c.execute(pid, "opus", env())  # executing before any vote
    with pytest.raises(NotAllowed, match="at 'verify'"):
        c.integrate(pid, roles["integrator"], vote())  # the integrator before the verifier
    c.verify(pid, roles["verifier"], vote())
    with pytest.raises(NotAllowed, match="at 'integrate'"):
        c.verify(pid, roles["verifier"], vote("reject"))  # a second vote
    with pytest.raises(NotAllowed):
        c.decide_human(pid, "root", "approve")  # nothing asks a human for medium stakes


def test_a_vote_file_written_in_another_role_is_ignored(c: Consensus) -> None:
    pid, _ = opened(c)
    folder = c.records_dir / pid
    # opus writes a verifier vote naming itself: derived state ignores it
    (folder / "verify-01.json").write_text(json.dumps({**vote(), "citizen": "opus"}))
    assert c.load(pid).phase == "verify"


def test_a_revision_out_of_turn_cannot_swap_approved_actions(c: Consensus) -> None:
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    sneaky = {**proposal("evil.md", "rm"), "citizen": "opus", "round": 2}
    (c.records_dir / pid / "proposal-02.json").write_text(json.dumps(sneaky))
    d = c.load(pid)
    assert d.round == 1 and d.phase == "execute"
    c.execute(pid, "opus", env())
    assert (c.world.dir / "hello.md").exists() and not (c.world.dir / "evil.md").exists()


READ = {"tool": "read_file", "args": {"path": "README.md"}}


def low(**extra: Any) -> dict[str, Any]:
    """A low-stakes proposal (it only reads): the only stakes a tiebreak can decide."""
    return {**proposal(**extra), "actions": [READ],
            "expected_outcomes": ["README.md is read and its first line reported"]}


def test_discussion_then_compromise_then_tiebreak(c: Consensus) -> None:
    pid, roles = opened(c, low())
    v, i = roles["verifier"], roles["integrator"]
    for r in (1, 2):
        c.verify(pid, v, vote("reject", "too risky", values=("safety",)))
        d = c.integrate(pid, i, vote("reject", values=("coherence",)))
        assert d.phase == "revise" and d.level == "discussion" and d.round == r
        c.propose(pid, "opus", low(response_to_concerns=f"answered round {r}"))
    c.verify(pid, v, vote("reject", "still risky", values=("safety",)))
    d = c.integrate(pid, i, {**vote("propose_compromise", values=("safety",)),
                             "compromise": {"proposed_changes": "read a smaller file"}})
    assert d.phase == "revise" and d.level == "compromise"
    c.propose(pid, "opus", low(content="Hello", value_justification={
        "efficiency": "one read of one file, no writes, the cheapest way to get the answer",
        "cooperation": "the first line is what the operator asked for, reported as it is"}))
    c.verify(pid, v, vote("reject", "no", values=("safety", "truth")))
    d = c.integrate(pid, i, vote("reject", values=("coherence",)))
    # the approve side (opus: efficiency 0.75, cooperation 0.7) against the reject side's
    # two heaviest of truth 1.0, safety 0.9, coherence 0.85: 0.725 vs 0.95
    assert d.tiebreak is not None
    assert d.level == "tiebreak" and d.tiebreak["winner"] == "reject"
    assert d.tiebreak["values_compared"] == 2
    assert d.result == "rejected" and d.phase == "record"
    assert c.view_locations(pid) == ["pending"]
    d = c.record(pid, i, {"key_learnings": ["dissent held"]})
    assert c.view_locations(pid) == ["rejected"]


def test_a_contested_tiebreak_goes_to_a_human(c: Consensus) -> None:
    pid, roles = opened(c, low())
    v, i = roles["verifier"], roles["integrator"]
    for r in (1, 2, 3):
        # the verifier rejects citing truth and transparency (1.0, 0.85 by its profile);
        # opus's proposal cites the same values (0.9, 0.85): within 10% - contested
        c.verify(pid, v, vote("reject", "unclear", values=("truth", "transparency")))
        c.integrate(pid, i, vote("reject", values=()))
        if r < 3:
            c.propose(pid, "opus", low())
    d = c.load(pid)
    assert d.tiebreak is not None
    assert d.tiebreak["contested"] and d.phase == "human" and d.owed_by == "operator"
    wv = c.weights.current(v)
    assert d.tiebreak["scores"] == {"approve": 0.875,  # opus: (truth 0.9 + transparency 0.85)/2
                                    "reject": round((wv["truth"] + wv["transparency"]) / 2, 4)}


def test_high_stakes_never_executes_without_a_human(c: Consensus) -> None:
    pid, roles = opened(c, proposal(tool="run", content="rm -rf /"))
    c.verify(pid, roles["verifier"], vote())
    d = c.integrate(pid, roles["integrator"], vote())
    assert d.stakes == "high" and d.phase == "human" and d.owed_by == "operator"
    with pytest.raises(NotAllowed, match="at 'human'"):
        c.execute(pid, "opus", env())
    d = c.decide_human(pid, "root", "reject", "never")
    assert d.result == "rejected" and d.phase == "record"
    with pytest.raises(NotAllowed, match="nothing for a human to approve"):
        c.decide_human(pid, "root", "approve")
    with pytest.raises(NotAllowed, match="already decided"):
        c.decide_human(pid, "root", "reject", "twice")


def test_a_human_approval_lets_high_stakes_run(c: Consensus) -> None:
    pid, roles = opened(c, proposal(tool="delete_file", path="README.md", content=""))
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    assert c.decide_human(pid, "root", "approve", "checked").phase == "execute"
    c.execute(pid, "opus", env())
    assert not (c.world.dir / "README.md").exists()


def test_an_unverified_outcome_is_reverted(c: Consensus) -> None:
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    c.execute(pid, "opus", env())
    d = c.check(pid, roles["verifier"], {"outcomes_verified": False, "rationale": "wrong"})
    assert d.outcome is not None
    assert d.result == "rejected" and d.outcome["reverted"]
    assert not (c.world.dir / "hello.md").exists()


def test_a_failed_execution_leaves_nothing_behind(c: Consensus) -> None:
    body = proposal()
    body["actions"].append({"tool": "edit_file", "args": {"path": "nope.md", "old": "a",
                                                          "new": "b"}})
    body["expected_outcomes"].append("nope.md says b")
    pid, roles = opened(c, body)
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    d = c.execute(pid, "opus", env())
    assert d.result == "rejected" and "execution failed" in d.why
    assert not (c.world.dir / "hello.md").exists()


def test_paths_cannot_leave_the_world(c: Consensus) -> None:
    pid, roles = opened(c, proposal(path="../../etc/passwd"))
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    d = c.execute(pid, "opus", env())
    assert d.execution is not None
    assert not d.execution["success"] and "leaves the world" in d.execution["error"]


def test_the_round_cap_hands_over_to_a_human(c: Consensus) -> None:
    assert MAX_ROUNDS == 10
    pid, roles = opened(c)
    c.verify(pid, roles["verifier"], vote())
    d = c.integrate(pid, roles["integrator"], vote("escalate_to_human"))
    assert d.phase == "human" and "escalated" in d.why


def test_weights_stay_within_bounds(c: Consensus) -> None:
    c.weights.vouch = None  # the bounds' mechanics alone (no proposal vouches for ep-1)
    before = c.weights.current("mira")["truth"]  # verifier profile: truth 1.0, bounds 0.8-1.0
    with pytest.raises(Invalid, match="outside its bounds"):
        c.weights.adjust("mira", "truth", 0.05, episodes=["ep-1"], approved_by="aria",
                         reason="more truth")
    with pytest.raises(Invalid, match="cite"):
        c.weights.adjust("mira", "truth", -0.05, episodes=[], approved_by="aria", reason="")
    with pytest.raises(Invalid, match="own weights"):
        c.weights.adjust("aria", "truth", -0.05, episodes=["ep-1"], approved_by="aria",
                         reason="")
    with pytest.raises(Invalid, match="over the limit"):
        c.weights.adjust("mira", "truth", -0.15, episodes=["ep-1"], approved_by="aria",
                         reason="")
    c.weights.adjust("mira", "truth", -0.1, episodes=["ep-1"], approved_by="aria", reason="r")
    assert c.weights.current("mira")["truth"] == pytest.approx(before - 0.1)
    # a hand-written history line that would break the bounds is not applied
    with c.weights.history_path.open("a") as fh:
        fh.write(json.dumps({"citizen": "mira", "value": "truth", "delta": -0.5}) + "\n")
    assert c.weights.current("mira")["truth"] == pytest.approx(before - 0.1)


def test_gaming_flags_are_deterministic_and_recorded(c: Consensus) -> None:
    generic = proposal()
    generic["value_justification"] = {"cooperation": "this helps cooperation",
                                      "fairness": "it is fair to everyone involved here"}
    generic["expected_outcomes"] = ["it works"]
    found = flags(generic, c.framework.base_values, {})
    assert any("generic justification for cooperation" in f for f in found)
    assert any("'fairness', which is not a base value" in f for f in found)
    assert any("no expected outcome naming it" in f for f in found)
    assert flags(proposal(), c.framework.base_values, {}) == []
    one, _ = opened(c)
    other, _ = opened(c)  # the same justification again
    # ids sort oldest first (two opened within a second sort by their random suffix):
    # the later one is the copy, and only the copy is flagged
    first, second = sorted((one, other))
    roles = c.load(second).roles
    d = c.load(second)
    assert any(f"repeated from {first}" in f for f in d.flags)
    assert not any("repeated from" in f for f in c.load(first).flags)
    c.verify(second, roles["verifier"], vote())
    rec = json.loads((c.records_dir / second / "verify-01.json").read_text())
    assert rec["deterministic_flags"] == d.flags


def test_episodes_compact_keeping_the_last_hundred(c: Consensus,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(episodes_mod, "COMPACT_AT", 30)
    monkeypatch.setattr(episodes_mod, "KEEP", 10)
    for n in range(31):
        c.episodes.add({"id": f"ep-{n}", "goal": f"goal {n}", "outcome": "approved",
                        "key_learnings": ["tests first" if n % 2 else "small steps"]})
    assert [e["id"] for e in c.episodes.all()] == [f"ep-{n}" for n in range(21, 31)]
    assert len(c.episodes.archive_all()) == 21
    assert "tests first" in c.episodes.summary.read_text()
    found = c.episodes.relevant("goal 25 please")
    assert found and found[0]["id"] == "ep-25"


def test_corrupt_records_are_kept_and_ignored(c: Consensus) -> None:
    pid, _ = opened(c)
    bad = c.records_dir / pid / "verify-01.json"
    bad.write_text("{not json")
    assert c.load(pid).phase == "verify"
    assert bad.read_text() == "{not json"


def test_a_proposer_that_gives_up_withdraws_and_a_reviewer_hands_over(c: Consensus) -> None:
    d = c.request(HELLO, "opus", "operator")
    d = c.give_up(d.id, "opus", "the model failed three times")
    assert d.result == "rejected" and "withdrawn" in d.why and d.phase == "record"
    pid, roles = opened(c)
    with pytest.raises(NotAllowed):
        c.give_up(pid, "opus", "not mine to give up")
    d = c.give_up(pid, roles["verifier"], "no valid review")
    assert d.phase == "human" and "could not verify" in d.why
    assert c.decide_human(pid, "root", "approve", "looked myself").phase == "execute"


def test_owed_rederives_only_what_moved_and_everything_when_weights_change(
        c: Consensus, monkeypatch: pytest.MonkeyPatch) -> None:
    """owed() keeps who owes each proposal while its thread is unchanged - but the value
    weights can decide a tiebreak, so a change of weights makes it derive them all again."""
    pids = [opened(c)[0] for _ in range(3)]
    verifier = c.load(pids[0]).roles["verifier"]
    first = {d.id for d in c.owed(verifier)}
    loads: list[str] = []
    real_load = c.load

    def counted_load(pid: str) -> Proposal:
        loads.append(pid)
        return real_load(pid)

    monkeypatch.setattr(c, "load", counted_load)
    assert {d.id for d in c.owed(verifier)} == first
    assert sorted(loads) == sorted(first)  # only the owed ones, to return them
    loads.clear()
    c.weights.history_path.parent.mkdir(parents=True, exist_ok=True)
    with c.weights.history_path.open("a") as f:  # another proposal's episode moved weights
        f.write(json.dumps({"citizen": "mira", "value": "truth", "delta": 0.05}) + "\n")
    assert {d.id for d in c.owed(verifier)} == first
    assert set(pids) <= set(loads)  # every pending proposal derived again
