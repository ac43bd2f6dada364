"""Issue 43, part 1: k reviewers, not everyone - drawn by the broker, replaced when silent.

Each test failed on the code before: `code_announce` rang every peer, every peer's REVIEW
gate opened for every pending change and any peer's report counted, so one change cost a
test run per peer.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import git
import pytest

from citizen.access import client
from citizen.config import paths
from citizen.config.settings import EvolutionSettings
from citizen.home import reviewing
from citizen.llm.base import Reply, Request
from citizen.tools import code, core_tools
from citizen.tools.base import ToolFailure
from citizen.wake.flow import run_wake
from shared import change_rules, clock, doorbell, draws
from shared.change_rules import REVIEW_DEADLINE_S, assigned, rank
from shared.errors import NotAllowed
from tests.scripts import Actor, say, tool_env
from tests.test_evolution import APP, commit, evo, ran, reported, run  # noqa: F401 - evo: the fixture

PEERS = [f"p{i}" for i in range(10)]


def test_the_numbers_of_the_rule() -> None:
    """k defaults to 3 (the operator's evolution.reviewers), never under the seed's 2
    matching reports; a silent reviewer is replaced after an hour."""
    assert change_rules.REVIEWERS == 3 and EvolutionSettings().reviewers == 3
    assert change_rules.REPORTS_TO_VERIFY == 2
    schema = json.loads((paths.project_dir() / "templates" / "schemas" / "config" /
                         "citizen_configs.json").read_text())
    found = [v for v in _walk(schema) if isinstance(v, dict) and "reviewers" in v.get(
        "properties", {})]
    assert found and found[0]["properties"]["reviewers"]["minimum"] == 2
    assert REVIEW_DEADLINE_S == 3600 and change_rules.LOAD_WINDOW_S == 86400


def _walk(node: object) -> list[object]:
    out = [node]
    if isinstance(node, dict):
        for value in node.values():
            out += _walk(value)
    return out


# ------------------------------------------------------------ the draw, pure


def test_the_order_is_fixed_by_the_draw_and_unpredictable_before_it() -> None:
    first = rank("seed-1", "c-1", PEERS, {})
    assert rank("seed-1", "c-1", list(reversed(PEERS)), {}) == first  # deterministic
    assert sorted(first) == PEERS
    # Another seed (the broker's, drawn after the commit was fixed) gives another order:
    # an author cannot grind its commit hash until its friends come first.
    others = {tuple(rank(f"seed-{i}", "c-1", PEERS, {})[:3]) for i in range(20)}
    assert len(others) > 10


def test_the_draw_is_fair_over_many_changes() -> None:
    """Over 3,000 changes each of 10 peers is among the first 3 about 3 times in 10."""
    firsts: Counter[str] = Counter()
    for i in range(3000):
        firsts.update(rank(f"s{i}", f"c-{i}", PEERS, {})[:3])
    assert all(750 <= n <= 1050 for n in firsts.values()), firsts  # 900 expected


def test_load_and_focus_order_the_draw() -> None:
    """The least loaded first; a peer whose focus names the files as if one review less."""
    load = dict.fromkeys(PEERS, 1) | {"p7": 0}
    assert rank("s", "c", PEERS, load)[0] == "p7"
    load = dict.fromkeys(PEERS, 1) | {"p2": 5}
    assert rank("s", "c", PEERS, load)[-1] == "p2"
    assert rank("s", "c", PEERS, dict.fromkeys(PEERS, 1), {"p4"})[0] == "p4"
    assert change_rules.relevant(["citizen/wake/review.py"], "reviews and wakes", [])
    assert change_rules.relevant(["docs/seeds.md"], "", ["seeds", "specs"])
    assert not change_rules.relevant(["citizen/mail/intake.py"], "consensus", ["debates"])


def test_a_silent_reviewer_is_replaced_after_the_deadline_its_late_report_counts() -> None:
    order, d = ["a", "b", "c", "d", "e"], REVIEW_DEADLINE_S
    answered = {"a": 100.0, "b": 200.0}
    assert assigned(order, 3, 0.0, answered, now=d - 1) == ["a", "b", "c"]
    assert assigned(order, 3, 0.0, answered, now=d + 1) == ["a", "b", "c", "d"]
    late = {**answered, "c": d + 500}  # c answered after d was drawn in: both stay
    assert assigned(order, 3, 0.0, late, now=d + 600) == ["a", "b", "c", "d"]
    # d is silent too: an hour after it was drawn in, e takes its slot
    assert assigned(order, 3, 0.0, late, now=2 * d + 1) == ["a", "b", "c", "d", "e"]
    assert assigned(order, 3, 0.0, {}, now=100 * d) == order  # never past the order


def test_every_reviewer_answered_without_a_verdict_brings_one_more() -> None:
    answered = {"a": 1.0, "b": 2.0}
    assert assigned(["a", "b", "c"], 2, 0.0, answered, now=10, undecided=True) == [
        "a", "b", "c"]
    assert assigned(["a", "b", "c"], 2, 0.0, answered, now=10, undecided=False) == ["a", "b"]


# ------------------------------------------------------------ through the broker


@pytest.fixture
def crowd(civ_root: Path, rules_dir: Path) -> Path:
    """A dev-mode civilization of opus and ten peers, each with a clone of a baseline."""
    from citizen import config
    from citizen.admin import founding

    tpl = config.templates()
    base = tpl.citizen_data("opus")
    founding.init_shared()
    for name in ["opus", *PEERS]:
        founding.init_citizen(name, {**base, "email": f"{name}@example.org"})
    baseline = git.Repo.init(civ_root / "shared" / "baseline", initial_branch="main")
    with baseline.config_writer() as cw:
        cw.set_value("user", "name", "setup").set_value("user", "email", "setup@x")
    commit(baseline, {"app.py": APP}, "baseline")
    baseline.git.update_ref("refs/heads/release", "HEAD")
    for name in ["opus", *PEERS]:
        code_dir = civ_root / name / "code"
        code_dir.rmdir()
        repo = git.Repo.clone_from(str(baseline.working_dir), code_dir)
        with repo.config_writer() as cw:
            cw.set_value("user", "name", name).set_value("user", "email", f"{name}@x")
    # The operator's k for opus's changes (the broker reads the author's rules).
    (rules_dir / "opus.json").write_text(json.dumps({"evolution": {"reviewers": 4}}))
    return civ_root


def announce(civ: Path) -> str:
    commit(git.Repo(civ / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hey'")}, "c")
    return str(run("opus", "code_announce", description="d", expected_outcome="e")["id"])


def test_the_broker_draws_k_reviewers_and_only_they_are_rung(crowd: Path) -> None:
    cid = announce(crowd)
    record = json.loads((crowd / "shared" / "draws" / f"{cid}.json").read_text())
    assert record["k"] == 4 and sorted(record["order"]) == PEERS  # never the author
    assert len(record["seed"]) == 32  # the broker's random draw, after the commit
    drawn = record["order"][:4]
    rung = {p for p in PEERS if doorbell.drain(paths.home(p).doorbell)}
    assert rung == set(drawn)  # 4 doorbells, not 10
    assert doorbell.drain(paths.home("opus").doorbell) == []
    # The first draw stands: asking again (anyone may) changes nothing.
    status, answer = client.request("p0", "POST", "/v1/experience/changes/draw",
                                    {"change_id": cid})
    assert status == 200 and answer["first"] == drawn
    assert json.loads((crowd / "shared" / "draws" / f"{cid}.json").read_text()) == record
    # Only the drawn see it waiting for their review.
    waiting = {p for p in PEERS if run(p, "code_pending_reviews")}
    assert waiting == set(drawn)


def test_a_peer_not_drawn_neither_tests_nor_counts(crowd: Path) -> None:
    cid = announce(crowd)
    evolution = code.evolution()
    change = evolution.get(cid)
    outsider = next(p for p in PEERS if p not in change.reviewers)
    with pytest.raises(ToolFailure, match="not one of the reviewers drawn"):
        core_tools(code=True)["code_test"].run(tool_env(outsider), {"change_id": cid})
    ran(outsider, cid, 0)  # a run filed past the tool
    with pytest.raises(NotAllowed, match="not one of the reviewers drawn"):
        run(outsider, "code_report_outcome", change_id=cid, outcome="worked", note="x")
    # Written past the tool too: recorded, never counted.
    for who in (outsider, next(p for p in PEERS if p not in change.reviewers
                               and p != outsider)):
        ran(who, cid, 0)
        evolution.report(cid, who, "worked", "not drawn")
    after = evolution.get(cid)
    assert after.status == "pending" and after.counted == {}
    assert "not one of the reviewers" in after.summary()["not_counted"][outsider]
    for reviewer in change.reviewers[:2]:
        ran(reviewer, cid, 0)
        run(reviewer, "code_report_outcome", change_id=cid, outcome="worked", note="ok")
    assert evolution.get(cid).status == "verified_good"


def test_the_author_rings_the_reviewer_drawn_in_for_a_silent_one(
        crowd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = announce(crowd)
    evolution = code.evolution()
    first = evolution.get(cid).reviewers
    for p in PEERS:
        doorbell.drain(paths.home(p).doorbell)
    for reviewer in first[:3]:  # three answer; the fourth stays silent
        ran(reviewer, cid, 1)
        run(reviewer, "code_report_outcome", change_id=cid, outcome="unclear", note="?")
    assert evolution.get(cid).status == "unresolved"  # two "unclear": closed, no more asks
    cid2 = _second_change(crowd)
    drawn = evolution.get(cid2).reviewers
    for p in PEERS:
        doorbell.drain(paths.home(p).doorbell)
    assert reviewing.follow_up(paths.home("opus")) == []  # nobody is late yet
    for reviewer in drawn[:3]:
        ran(reviewer, cid2, 0 if reviewer != drawn[2] else 1)
        run(reviewer, "code_report_outcome", change_id=cid2,
            outcome="unclear" if reviewer == drawn[2] else "worked", note="ran it")
    assert evolution.get(cid2).status == "verified_good"  # two worked, one unclear
    # A change still pending an hour later: its silent reviewer's slot passes on.
    cid3 = _second_change(crowd, "'yo'")
    drawn3 = evolution.get(cid3).reviewers
    for p in PEERS:
        doorbell.drain(paths.home(p).doorbell)
    ran(drawn3[0], cid3, 0)
    run(drawn3[0], "code_report_outcome", change_id=cid3, outcome="worked", note="ok")
    later = clock.time() + REVIEW_DEADLINE_S + 60
    monkeypatch.setenv(clock.CLOCK_ENV, f"{later},{clock.time()},1")
    now = evolution.get(cid3).reviewers
    assert now[:4] == drawn3 and len(now) == 7  # the three silent ones each replaced
    rang = reviewing.follow_up(paths.home("opus"))
    assert sorted(rang) == sorted(f"{cid3}: {p}" for p in now[4:])
    for p in now[4:]:
        (ring,) = doorbell.drain(paths.home(p).doorbell)
        assert ring.wake_type == "REVIEW" and cid3 in ring.reason
    assert reviewing.follow_up(paths.home("opus")) == []  # rung once
    # The settled changes are forgotten; the pending one is remembered.
    from citizen.home import state
    assert set(state.load(paths.home("opus"))["marks"][reviewing.MARK]) == {cid3}


def _second_change(civ: Path, text: str = "'ho'") -> str:
    repo = git.Repo(civ / "opus" / "code")
    commit(repo, {"app.py": APP.replace("'hi'", text)}, f"change {text}")
    return str(run("opus", "code_announce", description=text, expected_outcome="e")["id"])


def test_a_draw_not_written_by_the_broker_counts_for_nothing_on_a_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Server mode: the draw is the broker user's file; one planted by a citizen (a
    friendly order) is ignored, and without the broker's the change has no reviewers."""
    if os.geteuid() != 0:
        pytest.skip("needs root to own files as others")
    from shared import records
    from shared.evolution import Evolution

    shared = tmp_path / "shared"
    shared.mkdir()
    evolution = Evolution(shared, ["daemon", "bin", "sys", "man"], True)
    cid = "daemon-0123456789"
    records.write(evolution.dir, evolution.dir / cid / "announce.json", "daemon", {
        "id": cid, "commit": "ab" * 20, "files": ["a"], "description": "d",
        "expected_outcome": "e", "announced": clock.moment().isoformat()})
    os.chown(evolution.dir / cid / "announce.json", 1, -1)  # daemon's
    monkeypatch.setattr(draws, "DRAWER", "root")  # root stands in for the broker's user
    planted = draws.write(shared, cid, {"change": cid, "k": 2, "seed": "x",
                                        "drawn": clock.moment().isoformat(),
                                        "order": ["bin", "sys"]})
    os.chown(draws.path(shared, cid), 1, -1)  # written by the author, not the broker
    assert planted and evolution.get(cid).reviewers == []
    os.chown(draws.path(shared, cid), 0, -1)
    assert evolution.get(cid).reviewers == ["bin", "sys"]


# ------------------------------------------------------------ the adopters' one question


class Adopter(Actor):
    """Answers the adopt question, single or batched: adopt everything."""

    def _answer(self, request: Request) -> Reply:
        if request.purpose == "review_adopt":
            props = request.output_schema["properties"]  # type: ignore[index]
            if "decision" in props:
                return say(json.dumps({"reason": "serves me", "decision": "adopt"}))
            return say(json.dumps({cid: {"reason": "serves me", "decision": "adopt"}
                                   for cid in props}))
        return super()._answer(request)


@pytest.mark.usefixtures("evo")
def test_an_adopter_is_asked_once_for_all_the_verified_changes_waiting(civ: Path) -> None:
    """Two verified changes wait for aria: one question, one model call, both adopted."""
    repo = git.Repo(civ / "opus" / "code")
    ids = []
    for files in ({"app.py": APP.replace("'hi'", "'hey'")}, {"NOTES.md": "notes\n"}):
        commit(repo, files, f"change {sorted(files)}")
        ids.append(str(run("opus", "code_announce", description="d", expected_outcome="e")["id"]))
    for cid in ids:
        reported("mira", cid, "worked")
        reported("aria", cid, "worked")
    agent = Adopter()
    result = run_wake("aria", wake_type="REVIEW", provider=lambda c, s: agent)
    assert result.status == "ok" and agent.purposes().count("review_adopt") == 1
    assert result.calls == 1  # the adopters' whole cost: one question
    evolution = code.evolution()
    assert all("aria" in evolution.get(cid).adoptions for cid in ids)
    assert (civ / "aria" / "code" / "NOTES.md").exists()


@pytest.mark.usefixtures("civ")
def test_every_daemon_follows_up_its_changes_every_five_minutes() -> None:
    """The daemon's job (its own, or hosted in a crowd), not the server's scheduler's."""
    from apscheduler.schedulers.background import BackgroundScheduler

    from citizen.daemon.process import Daemon

    assert reviewing.FOLLOW_UP_S == 300
    scheduler = BackgroundScheduler()
    Daemon("opus", scheduler=scheduler)._schedule()  # hosted: the jobs, not started
    job = scheduler.get_job("opus:reviews")
    assert job is not None and job.trigger.interval.total_seconds() == 300
    assert job.args[0].name == "opus"
    job.func(*job.args)  # nothing remembered: nothing read, nothing rung, no error


# ------------------------------------------------------------ a drawn review goes first


def test_a_drawn_reviewer_owing_a_report_queues_ahead_of_the_adopters() -> None:
    """The broker's permit queue: places the broker's records say owe a drawn review go
    ahead of everyone else (first come first served among themselves). Before, a
    verification's ring to N adopters put every later change's reviews behind N wakes."""
    from citizen.broker.permits import Permits

    owed = {"r1", "r2"}
    p = Permits(lambda: (1, 60.0), first=owed.__contains__)
    holder = p.join("busy")
    adopters = [p.join(f"a{i}") for i in range(5)]
    r1, r2 = p.join("r1"), p.join("r2")
    assert (p.ahead(r1), p.ahead(r2)) == (0, 1)  # ahead of the five asked before them
    assert p.ahead(adopters[0]) == 2
    p.leave(holder)
    assert r1.granted.is_set() and not adopters[0].granted.is_set()
    broken = Permits(lambda: (1, 60.0), first=lambda c: 1 / 0 > 0)  # a records problem
    assert broken.join("x").granted.is_set()  # costs the priority, never the permit


def test_the_broker_knows_who_owes_a_review_from_its_draws_and_the_records(
        crowd: Path) -> None:
    from citizen.broker.reviews import owes_review

    cid = announce(crowd)
    change = code.evolution().get(cid)
    drawn = change.reviewers
    assert all(owes_review(r) for r in drawn)
    assert not any(owes_review(p) for p in PEERS if p not in drawn)
    assert not owes_review("opus")  # the author owes nothing
    ran(drawn[0], cid, 0)
    run(drawn[0], "code_report_outcome", change_id=cid, outcome="worked", note="ok")
    assert not owes_review(drawn[0]) and owes_review(drawn[1])  # reported: paid
    ran(drawn[1], cid, 0)
    run(drawn[1], "code_report_outcome", change_id=cid, outcome="worked", note="ok")
    # Verified by two: the other drawn still owe their runs (k runs a change), until merged.
    assert [owes_review(r) for r in drawn] == [False, False, True, True]


def test_the_crowd_dispatches_a_rung_reviewer_before_the_adopters(civ: Path) -> None:
    """`citizen run --all` (and the server's scheduler): a citizen rung to test a change
    goes to a worker ahead of those rung to adopt, who were ready first - also when the
    ring joins a REVIEW wake it already waits for (coalesced)."""
    from citizen.daemon.crowd import Crowd
    from citizen.daemon.process import Daemon

    crowd = Crowd([], parallel=1)
    crowd.workers = 1
    daemons = {n: Daemon(n) for n in ("opus", "mira", "aria")}
    for d in daemons.values():
        d.on_request = crowd._queue
    daemons["opus"]._request("REVIEW", "doorbell: change c0-1 is verified")
    daemons["mira"]._request("REVIEW", "doorbell: change c0-1 is verified")
    daemons["aria"]._request("REVIEW", "doorbell: change c0-1 is verified")
    # mira's REVIEW wake waits already: the announcement's ring joins it, and moves it up
    daemons["mira"]._request("REVIEW", "doorbell: c9 announced change c9-0123456789")
    order = []
    for _ in range(3):
        crowd._dispatch()
        item = crowd.work.get_nowait()
        assert item is not None
        order.append(item[0].name)
        crowd.busy.discard(item[0].name)
    assert order == ["mira", "opus", "aria"]  # then the adopters, in their order
    assert daemons["mira"].requests.qsize() == 0  # one wake, not two
