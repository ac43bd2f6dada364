"""The seeds' rules against a gaming citizen (issue 19): each test is the attack that won
on the code before - a proposer citing every value, one dissent on a medium proposal, a
double weight adjustment, a flagged proposal voted through - and what holds now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.atomic import append_line
from shared.consensus import Consensus
from shared.consensus.rules import MAX_ROUNDS, RED_TEAM_EVERY
from shared.errors import Invalid, NotAllowed
from tests.thoughtworld import HELLO, commons, env, proposal, vote

READ = {"tool": "read_file", "args": {"path": "README.md"}}
EVERY_VALUE = {  # specific enough to raise no gaming flag, each its own text
    "truth": "the report quotes README.md's first line exactly as it stands in the file",
    "transparency": "the read is one logged tool call that anyone can replay later on",
    "exploration": "nobody has looked at README.md this week, so the answer is new to us",
    "efficiency": "a single read of one small file is the cheapest way to get the answer",
    "cooperation": "the operator asked for this line and gets it without further work",
    "autonomy": "the executor chose the file to read from the task without being told",
    "safety": "reading changes nothing in the world repository, so nothing can break",
    "coherence": "earlier episodes read README.md the same way and it worked each time",
}


@pytest.fixture()
def c(tmp_path: Path) -> Consensus:
    return commons(tmp_path / "shared")


def opened(c: Consensus, body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    d = c.request(HELLO, "opus", "operator")
    c.propose(d.id, "opus", body)
    return d.id, d.roles


def low(**extra: Any) -> dict[str, Any]:
    return {**proposal(**extra), "actions": [READ],
            "expected_outcomes": ["README.md is read and its first line reported"]}


def three_rounds(c: Consensus, pid: str, roles: dict[str, str], body: dict[str, Any], *,
                 verifier: tuple[str, ...], integrator: tuple[str, ...],
                 integrate: str = "reject") -> Any:
    v, i = roles["verifier"], roles["integrator"]
    d = None
    for r in (1, 2, 3):
        c.verify(pid, v, vote("reject", "it does not do what the task asks", values=verifier))
        d = c.integrate(pid, i, vote(integrate, "see the verifier", values=integrator))
        if r < 3:
            c.propose(pid, "opus", {**body, "response_to_concerns": f"round {r}: it does"})
    return d


def test_citing_every_value_does_not_win_the_tiebreak(c: Consensus) -> None:
    """Before: the tiebreak summed every value a side cited - a proposer citing all eight
    (5.8) outweighed two reviewers capped at three (2.75 here), and its low-stakes
    proposal ran over two rejections. Now both sides are compared on the mean of the
    same number of their heaviest values."""
    body = low(value_justification=EVERY_VALUE)
    pid, roles = opened(c, body)
    d = three_rounds(c, pid, roles, body, verifier=("safety", "truth"),
                     integrator=("coherence",))
    assert d.tiebreak is not None and d.tiebreak["values_compared"] == 3
    assert d.tiebreak["winner"] != "approve", d.tiebreak
    assert d.phase in ("human", "record") and d.execution is None


def test_citing_fewer_values_gains_nothing_either(c: Consensus) -> None:
    """The other way to game a mean: cite only the heaviest value. Both sides are cut to
    the same number of values, so the reviewers' heaviest is compared with it."""
    body = low(value_justification={"truth": EVERY_VALUE["truth"]})
    pid, roles = opened(c, body)
    d = three_rounds(c, pid, roles, body, verifier=("truth", "safety"),
                     integrator=("coherence",))
    assert d.tiebreak["values_compared"] == 1
    wv, wi = c.weights.current(roles["verifier"]), c.weights.current(roles["integrator"])
    heaviest = max(wv["truth"], wv["safety"], wi["coherence"])
    assert d.tiebreak["scores"] == {"approve": 0.9, "reject": heaviest}  # opus: truth 0.9
    assert d.tiebreak["winner"] == ("reject" if heaviest > 0.9 / (1 - 0.1) else "")


def test_a_medium_proposal_with_one_dissent_goes_to_a_person(c: Consensus) -> None:
    """Before: three rounds of one dissent sent a medium proposal to the tiebreak, which
    the proposer's values won, and it ran. The seed: medium stakes need unanimity, a
    person's approval if dissent."""
    body = proposal()
    pid, roles = opened(c, body)
    d = three_rounds(c, pid, roles, body, verifier=("safety",),
                     integrator=("truth", "transparency"), integrate="approve")
    assert d.stakes == "medium" and d.tiebreak is None
    assert d.phase == "human" and d.owed_by == "operator"
    assert "medium stakes with dissent" in d.why
    d = c.decide_human(pid, "root", "approve", "read it, fine")
    assert d.phase == "execute"
    execution = c.execute(pid, "opus", env()).execution
    assert execution is not None and execution["success"]


def test_one_adjustment_per_value_per_participant_per_episode(c: Consensus) -> None:
    """Before: an episode could list the same value twice for one participant - 0.2 in
    one episode. Now the second is refused, and a history line added by hand for the
    same episode is ignored when weights are read."""
    body = proposal()
    pid, roles = opened(c, body)
    c.verify(pid, roles["verifier"], vote("approve_with_concerns", "check it exists"))
    c.integrate(pid, roles["integrator"], vote())
    c.execute(pid, "opus", env())
    c.check(pid, roles["verifier"], {"outcomes_verified": True, "rationale": "there"})
    before = c.weights.current("opus")["exploration"]
    step = {"citizen": "opus", "value": "exploration", "delta": 0.1, "reason": "it tried"}
    d = c.record(pid, roles["integrator"], {"key_learnings": ["x"],
                                            "weight_adjustments": [step, step]})
    assert c.weights.current("opus")["exploration"] == pytest.approx(before + 0.1)
    episode = c.episodes.all()[-1]
    assert len(episode["weight_adjustments"]) == 1
    assert "already moved" in episode["weight_adjustments_refused"][0]["refused"]
    forged = {**episode["weight_adjustments"][0], "old": before + 0.1, "new": before + 0.2}
    append_line(c.weights.history_path, forged)  # a second line for the same episode
    assert c.weights.current("opus")["exploration"] == pytest.approx(before + 0.1)
    assert d.phase == "done"


def test_a_flagged_high_stakes_proposal_goes_to_a_person_at_once(c: Consensus) -> None:
    """Before: gaming flags only informed the verifier; a flagged high-stakes proposal
    went round the discussion like any other. Now its first round's votes, whatever they
    are, hand it to a person, saying which flags."""
    body = proposal(tool="delete_file", value_justification={"safety": "this helps safety"})
    body["actions"] = [{"tool": "delete_file", "args": {"path": "README.md"}}]
    pid, roles = opened(c, body)
    assert c.load(pid).flags
    c.verify(pid, roles["verifier"], vote("reject", "it deletes the readme"))
    d = c.integrate(pid, roles["integrator"], vote("reject"))
    assert d.stakes == "high" and d.phase == "human" and d.round == 1
    assert "gaming flags" in d.why and "generic justification" in d.why


def test_a_flagged_medium_proposal_waits_for_its_proposers_answer(c: Consensus) -> None:
    """Before: a flagged medium proposal ran as soon as the votes allowed. Now it goes
    back to its proposer, who must answer the flags in a revision the reviewers judge."""
    body = proposal(value_justification={"cooperation": "this helps cooperation"})
    pid, roles = opened(c, body)
    assert any("generic" in f for f in c.load(pid).flags)
    c.verify(pid, roles["verifier"], vote())
    d = c.integrate(pid, roles["integrator"], vote())
    assert d.phase == "revise" and d.level == "gaming" and d.execution is None
    # The same revision again, answering nothing: still sent back.
    c.propose(pid, "opus", body)
    c.verify(pid, roles["verifier"], vote())
    d = c.integrate(pid, roles["integrator"], vote())
    assert d.phase == "revise" and d.level == "gaming"
    c.propose(pid, "opus", {**body, "response_to_concerns":
                            "the flag is right: the greeting serves cooperation because the "
                            "operator's welcome page links to it"})
    c.verify(pid, roles["verifier"], vote())
    d = c.integrate(pid, roles["integrator"], vote())
    assert d.phase == "execute" and d.round == 3


def test_the_tenth_round_goes_to_a_person(c: Consensus) -> None:
    """The seed's "max 10 rounds then escalate", reached by the rules, not asked for by an
    integrator: a flagged medium proposal whose proposer never answers the flags goes back
    round after round - until round MAX_ROUNDS, which hands it to a person."""
    assert MAX_ROUNDS == 10
    body = proposal(value_justification={"cooperation": "this helps cooperation"})
    pid, roles = opened(c, body)
    for r in range(1, MAX_ROUNDS + 1):
        if r > 1:
            c.propose(pid, "opus", body)  # the same revision, answering nothing
        c.verify(pid, roles["verifier"], vote())
        d = c.integrate(pid, roles["integrator"], vote())
        assert d.round == r
        if r < MAX_ROUNDS:
            assert d.phase == "revise" and d.level == "gaming"
    assert d.phase == "human" and d.level == "human" and "too many rounds" in d.why
    assert d.execution is None


def test_every_fifth_proposal_gets_a_red_team_review(c: Consensus) -> None:
    """The seed's red-team rounds: every RED_TEAM_EVERYth proposal its verifier must name
    how it could fail, whatever it decides; the vote records the stance."""
    pids = sorted(opened(c, proposal(path=f"f{n}.md"))[0] for n in range(RED_TEAM_EVERY))
    red = c.load(pids[-1])  # the fifth in the commons' order (ids sort oldest first)
    assert red.red_team and not any(c.load(p).red_team for p in pids[:-1])
    with pytest.raises(Invalid, match="red-team review"):
        c.verify(red.id, red.roles["verifier"], vote("approve"))
    d = c.verify(red.id, red.roles["verifier"],
                 vote("approve", "if the file exists its text is lost - git keeps it"))
    assert d.verifications[1]["red_team"] is True
    plain = c.load(pids[0])
    c.verify(plain.id, plain.roles["verifier"], vote("approve"))  # no stance asked


def test_converged_weights_are_spread_again_once_a_day(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's diversity enforcement: when the citizens' weights for a value converge
    (σ under its floor), the daily job steps each away from the mean - within bounds, at
    most 0.05, recorded as an adjustment - once a day; values still spread are left."""
    from citizen import civilization
    from citizen.admin import founding
    from shared.consensus import diversity

    monkeypatch.setenv("CIV_ROOT", str(tmp_path / "civ"))
    founding.init(["opus", "mira", "aria"])
    c = civilization.commons().consensus
    w = c.weights
    w.vouch = None  # the converging episodes below stand for real ones (no proposals here)
    # autonomy starts at opus 0.6, mira 0.7, aria 0.5; episodes pull them together
    w.adjust("mira", "autonomy", -0.1, episodes=["ep-1"], approved_by="aria", reason="r")
    w.adjust("aria", "autonomy", 0.1, episodes=["ep-2"], approved_by="mira", reason="r")
    assert w.diversity(c.citizens)["autonomy"] == 0.0
    before = {v: s for v, s in w.diversity(c.citizens).items()}
    civilization.keep_diverse()
    made = [ln for ln in w.history() if ln["approved_by"] == diversity.AUTHOR]
    assert {ln["value"] for ln in made} == {"autonomy"}, made  # nothing else converged
    assert all(abs(ln["delta"]) <= diversity.STEP + 1e-9 for ln in made)
    assert w.diversity(c.citizens)["autonomy"] > 0.0  # spread again (more each day, to the floor)
    for citizen in c.citizens:
        low, high = c.framework.bounds[w.profile(citizen)]["autonomy"]
        assert low <= w.current(citizen)["autonomy"] <= high
    civilization.keep_diverse()  # the same world day: nothing more
    assert len([ln for ln in w.history() if ln["approved_by"] == diversity.AUTHOR]) == len(made)
    assert all(w.diversity(c.citizens)[v] == before[v] for v in before if v != "autonomy")


def test_an_executor_naming_itself_its_reviewers_gets_the_rotation(c: Consensus) -> None:
    """Found by an adversarial review: the request is its opener's file; one naming opus
    executor, verifier and integrator made 1 vote of 1 "unanimous" and ran a medium
    proposal with nobody else. Now such roles are replaced by the rotation."""
    pid = c.threads.open({"task": HELLO, "requested_by": "opus", "source": {},
                          "roles": {"executor": "opus", "verifier": "opus",
                                    "integrator": "opus"}}, "prop-20990101T000000-0001")
    d = c.load(pid)
    assert d.roles["executor"] == "opus" and len(set(d.roles.values())) == 3
    c.propose(pid, "opus", proposal())
    with pytest.raises(NotAllowed):
        c.verify(pid, "opus", vote())
    d = c.load(pid)
    assert d.phase == "verify" and d.owed_by != "opus"


def test_an_answer_clears_only_the_flags_it_was_asked_about(c: Consensus) -> None:
    """Found by an adversarial review: any response (".") cleared the flags, even ones
    the answering revision itself raised (a new write no outcome names)."""
    body = proposal(value_justification={"cooperation": "this helps cooperation"})
    pid, roles = opened(c, body)
    c.verify(pid, roles["verifier"], vote())
    assert c.integrate(pid, roles["integrator"], vote()).level == "gaming"
    sneaky = {**body, "response_to_concerns": "the greeting is what the operator asked for,"
                                              " so it serves cooperation directly"}
    sneaky["actions"] = [*body["actions"],
                         {"tool": "write_file", "args": {"path": "other.md", "content": "y"}}]
    c.propose(pid, "opus", sneaky)
    c.verify(pid, roles["verifier"], vote())
    d = c.integrate(pid, roles["integrator"], vote())
    assert d.phase == "revise" and d.level == "gaming" and d.execution is None
    c.propose(pid, "opus", {**sneaky, "response_to_concerns": "."})
    c.verify(pid, roles["verifier"], vote())
    assert c.integrate(pid, roles["integrator"], vote()).level == "gaming"


def test_a_planted_older_copy_does_not_reopen_what_ran(c: Consensus) -> None:
    """Found by an adversarial review: a directory planted to sort before an executed
    proposal, holding its justification, flagged it as a copy after the fact and sent it
    back to revise. A directory without a request is no proposal: it is compared with
    nothing and moves no proposal's red-team place."""
    pid, roles = opened(c, proposal())
    c.verify(pid, roles["verifier"], vote("approve", "fine"))
    c.integrate(pid, roles["integrator"], vote())
    c.execute(pid, "opus", env())
    fake = c.records_dir / "prop-0-0000"
    fake.mkdir()
    (fake / "proposal-01.json").write_text(json.dumps(
        {"value_justification": proposal()["value_justification"]}))
    c.cited = type(c.cited)(c.threads)
    d = c.load(pid)
    assert d.phase == "check" and d.execution is not None
    assert not d.red_team and c._place(pid) == 0


def test_a_weight_moves_only_for_an_adjustment_its_episode_approved(c: Consensus) -> None:
    """Found by an adversarial review: the history is one group-writable file, and five
    lines citing invented episodes took opus's autonomy from 0.6 to 1.0 (and won it a
    tiebreak). Now a line counts only if its episode's record, written by that
    proposal's integrator, lists exactly that adjustment; a diversity line only if the
    replay itself would take that step. Malformed lines stop no reader."""
    before = c.weights.current("opus")["autonomy"]
    for n in range(5):
        append_line(c.weights.history_path, {"citizen": "opus", "value": "autonomy",
                                             "delta": 0.1, "episodes": [f"ep-forged-{n}"],
                                             "approved_by": "mira"})
    append_line(c.weights.history_path, {"citizen": "opus", "value": "autonomy",
                                         "delta": 0.05, "episodes": ["diversity-2026-01-01"],
                                         "approved_by": "diversity"})  # σ is not low
    with c.weights.history_path.open("a") as fh:
        fh.write('[1]\n"x"\n{"citizen": "opus", "value": ["truth"]}\n')
    with c.weights.history_path.open("ab") as fh:
        fh.write(b"\xff\xfe\n")
    assert c.weights.current("opus")["autonomy"] == before
    # the genuine path still works: an episode recorded by the proposal's integrator
    pid, roles = opened(c, proposal())
    c.verify(pid, roles["verifier"], vote("approve", "fine"))
    c.integrate(pid, roles["integrator"], vote())
    c.execute(pid, "opus", env())
    c.check(pid, roles["verifier"], {"outcomes_verified": True, "rationale": "there"})
    c.record(pid, roles["integrator"], {"key_learnings": ["x"], "weight_adjustments": [
        {"citizen": "opus", "value": "autonomy", "delta": 0.1, "reason": "it chose well"}]})
    assert c.weights.current("opus")["autonomy"] == pytest.approx(before + 0.1)
