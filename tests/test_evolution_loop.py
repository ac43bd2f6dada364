"""The evolution loop runs by itself (issue 30, item 1): announcing rings the peers; a
REVIEW wake opens only when the records show work for this citizen, and its prompt
names that work; with nothing waiting it is idle and calls no model."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import git
import pytest

from citizen import civilization, config
from citizen.cli import demo
from citizen.config import paths
from citizen.home import spend, state
from citizen.home.tasks import TaskQueue
from citizen.llm.base import Reply, Request, Usage
from citizen.llm.scripted import ScriptedProvider
from citizen.tools import code
from citizen.wake.flow import WakeResult, run_wake
from citizen.wake.types.dry_audit import MARK as DRY_MARK
from citizen.wake.types.review import MAX_SHOWINGS
from shared import clock, doorbell
from shared.atomic import write_json
from shared.evolution import Evolution
from tests.anthropic_server import MessagesServer, text
from tests.daemons import cli, daemon_env, routing, start, wait_for
from tests.scripts import Actor, call, events, say
from tests.test_evolution import APP, commit, evo, reported, run  # noqa: F401 - evo: the fixture

pytestmark = pytest.mark.usefixtures("evo")  # each citizen's ~/code cloned from a baseline

ITEM = re.compile(r"^- (change|dynamic tool|library module) (\S+) .* - (.*)$", re.MULTILINE)


class Reviewer(Actor):
    """Answers what a REVIEW wake asks, as a model reading it would: the structured
    question after a test run (what did you see?) and before an adoption (adopt?), and
    in the tool loop reviews a tool or a module."""

    def __init__(self, outcome: str = "unclear", decision: str = "adopt") -> None:
        super().__init__()
        self.prompts: list[str] = []
        self.offered: list[list[str]] = []  # the outcomes each report's schema offered
        self.outcome, self.decision = outcome, decision

    def _answer(self, request: Request) -> Reply:
        first = str(request.messages[0]["content"])
        if request.purpose == "review_outcome":
            self.prompts.append(first)
            schema: Any = request.output_schema
            self.offered.append(list(schema["properties"]["outcome"]["enum"]))
            return say(json.dumps({"outcome": self.outcome, "note": "read the test run"}))
        if request.purpose == "review_adopt":
            self.prompts.append(first)
            return say(json.dumps({"decision": self.decision, "reason": "it serves me"}))
        if request.purpose == "execute" and len(request.messages) == 1:
            self.prompts.append(first)
            self.work = [self._step(kind, name) for kind, name, _ in ITEM.findall(first)]
        return super()._answer(request)

    @staticmethod
    def _step(kind: str, name: str) -> Reply:
        if kind == "dynamic tool":
            review_tool = call("tool_review", decision="reject", note="no use for it")
            (asked,) = review_tool.tool_calls  # `name` is the tool's argument here, not call's
            return replace(review_tool, tool_calls=(
                replace(asked, input={**asked.input, "name": name}),))
        if kind == "library module":
            return call("library_review", module_id=name, decision="approve", note="clear")
        raise AssertionError(f"a {kind} item reached the tool loop: the wake steps it")


def never(*_: object) -> Actor:
    raise AssertionError("an idle REVIEW wake built a model")


def review(name: str, agent: Actor | None = None) -> WakeResult:
    return run_wake(name, wake_type="REVIEW",
                    provider=(lambda c, s: agent) if agent is not None else never)


def announce(civ: Path, text: str = "'hello'") -> str:
    commit(git.Repo(civ / "opus" / "code"), {"app.py": APP.replace("'hi'", text)}, "greeting")
    return str(run("opus", "code_announce", description="warmer greeting",
                   expected_outcome="greet() says hello; tests pass")["id"])


def test_with_nothing_to_review_the_wake_is_idle_and_free(civ: Path) -> None:
    for name in ("opus", "mira", "aria"):
        result = review(name)
        assert result.status == "idle" and result.calls == 0 and result.cost_usd == 0


def test_announcing_a_change_rings_every_peer_for_a_review(civ: Path) -> None:
    cid = announce(civ)
    for peer in ("mira", "aria"):
        (ring,) = doorbell.drain(paths.home(peer).doorbell)
        assert ring.wake_type == "REVIEW" and cid in ring.reason and ring.sender == "opus"
    assert doorbell.drain(paths.home("opus").doorbell) == []  # not its own


def test_a_peer_reviews_the_change_its_wake_names_then_the_gate_closes(civ: Path) -> None:
    cid = announce(civ)
    assert review("opus").status == "idle"  # nobody reviews their own change
    agent = Reviewer()
    result = review("mira", agent)
    assert result.status == "ok" and cid in agent.prompts[0]
    # Mechanical first: the wake ran the tests and filed the report; the model only judged.
    assert [e["tool"] for e in events(result.log_path, "tool_call")] == [
        "code_test", "code_report_outcome"]
    assert "tests passed" in agent.prompts[0] and agent.offered == [
        ["worked", "failed", "unclear"]]
    assert "execute" not in agent.purposes()  # no tool loop for this item
    (change,) = civilization.commons().evolution.changes()
    assert set(change.reports) == {"mira"} and change.reports["mira"]["outcome"] == "unclear"
    assert review("mira").status == "idle"  # reported: nothing more for mira
    assert review("aria", Reviewer()).status == "ok"  # aria has not reported yet


def test_a_failing_test_run_cannot_be_reported_worked(civ: Path) -> None:
    """A report may not contradict the evidence: when the tests fail, the schema offered
    has no "worked", and an answer that says it anyway (forged past the schema) is
    refused - nothing is filed."""
    cid = announce(civ, "'bye'")  # greet() no longer starts with 'h': its test fails
    agent = Reviewer(outcome="failed")
    assert review("mira", agent).status == "ok"
    assert "tests FAILED" in agent.prompts[0] and agent.offered == [["failed", "unclear"]]
    assert civilization.commons().evolution.get(cid).reports["mira"]["outcome"] == "failed"

    forged = Reply(text="", model="scripted", provider="scripted", usage=Usage(100, 10),
                   data={"outcome": "worked", "note": "all good"})
    forger = Actor()
    forger.work = [forged]
    result = review("aria", forger)
    assert "review_outcome" in forger.purposes()
    (refused,) = events(result.log_path, "review_refused")
    assert refused["outcome"] == "worked" and refused["offered"] == ["failed", "unclear"]
    assert "code_report_outcome" not in [e["tool"] for e in events(result.log_path, "tool_call")]
    assert set(civilization.commons().evolution.get(cid).reports) == {"mira"}


def test_a_verified_change_opens_the_gate_until_adopted_or_declined(civ: Path) -> None:
    cid = announce(civ)
    for peer in ("mira", "aria"):
        reported(peer, cid, "worked", "tests pass")
    agent = Reviewer()
    assert review("mira", agent).status == "ok"
    assert cid in agent.prompts[0] and agent.purposes().count("review_adopt") == 1
    assert "'hello'" in (civ / "mira" / "code" / "app.py").read_text()  # adopted
    assert review("mira").status == "idle"
    holdout = Reviewer(decision="decline")
    assert review("aria", holdout).status == "ok"  # the wake files the decline itself
    (change,) = civilization.commons().evolution.changes()
    assert "aria" in change.declines and change.declines["aria"]["reason"] == "it serves me"
    assert "'hello'" not in (civ / "aria" / "code" / "app.py").read_text()
    assert review("aria").status == "idle"  # held out: nothing more to ask of aria


def test_the_report_that_verifies_a_change_rings_those_who_lack_it(civ: Path) -> None:
    cid = announce(civ)
    for name in ("mira", "aria"):
        doorbell.drain(paths.home(name).doorbell)
    reported("mira", cid, "worked", "ok")
    assert doorbell.drain(paths.home("aria").doorbell) == []  # one report verifies nothing
    reported("aria", cid, "worked", "ok")
    for lacking in ("mira", "aria"):  # the reporter that verified it decides too
        (ring,) = doorbell.drain(paths.home(lacking).doorbell)
        assert ring.wake_type == "REVIEW" and "verified" in ring.reason
    assert doorbell.drain(paths.home("opus").doorbell) == []  # the author holds it


def test_an_item_the_model_leaves_undone_stops_opening_the_gate(civ: Path) -> None:
    announce(civ)
    for _ in range(MAX_SHOWINGS):  # a model that never gets round to it
        assert review("mira", Actor(say("later"))).status == "ok"
    assert review("mira").status == "idle"


def test_a_peers_tool_and_module_wait_for_review(civ: Path) -> None:
    commons = civilization.commons()
    commons.tools.propose("opus", "shout", description="upper-cases text",
                          input_schema={"type": "object"}, reserved=set(),
                          code="def run(text=''):\n    return text.upper()\n",
                          tests="from shout import run\n\n\ndef test_it():\n"
                                "    assert run('a') == 'A'\n")
    commons.library.propose("opus", "git-tips", "git", "how to bisect", "Use git bisect.")
    agent = Reviewer()
    assert review("mira", agent).status == "ok"
    assert "shout" in agent.prompts[0] and "git-tips" in agent.prompts[0]
    assert review("mira").status == "idle"
    assert review("opus").status == "idle"  # its own


def test_an_open_dry_violation_in_its_code_opens_the_gate_until_fixed(civ: Path) -> None:
    dry = civilization.commons().dry
    mine = dry.report("mira", "app.py:1-2", "greet and hello say the same", "keep greet")
    peers = dry.report("mira", f"{civ / 'aria' / 'code'}/app.py", "two greetings", "one")
    agent = Actor(say("fixed it"))
    result = review("mira", agent)
    assert result.status == "ok"
    prompt = str(agent.requests[-1].messages[0]["content"])
    assert mine in prompt and "dry_violation_fixed" in prompt and "keep greet" in prompt
    assert peers not in prompt  # in aria's code: aria's work
    assert review("opus").status == "idle"  # neither found by opus nor in its code
    aria = Actor(say("later"))
    assert review("aria", aria).status == "ok"
    assert peers in str(aria.requests[-1].messages[0]["content"])
    dry.fixed("mira", mine, "one greeting now")
    assert review("mira").status == "idle"


def test_an_idle_civilization_makes_no_model_call_over_a_simulated_day(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every slot of a day cycled (hourly wakes, the shipped allocation), with nothing to
    review, no task and no goal - self-directed slots included: not one model call."""
    built: list[str] = []

    def counting(cfg: Any, _secrets: Any) -> ScriptedProvider:
        built.append(cfg.name)
        return ScriptedProvider(default=lambda r: say("should not be asked"))

    day = datetime(2026, 11, 24, tzinfo=UTC).timestamp()
    for name in ("opus", "mira", "aria"):  # audited yesterday; a daemon cleanly stopped
        state.mark(paths.home(name), DRY_MARK, str(git.Repo(civ / name / "code").head.commit))
        write_json(paths.home(name).heartbeat, {"state": "stopped", "pid": os.getpid(),
                                                "updated": clock.now()})
    seen: set[str] = set()
    for hour in range(24):
        monkeypatch.setenv(clock.CLOCK_ENV, f"{day + hour * 3600},{time.time()},1")
        for name in ("opus", "mira", "aria"):
            result = run_wake(name, provider=counting)
            assert (result.status, result.calls, result.cost_usd) == ("idle", 0, 0.0), (
                name, result.wake_type, result.reason)
            seen.add(result.wake_type)
    assert built == []  # no provider was even built
    assert {"CODE", "DEBUG", "RESEARCH", "REVIEW", "TASK", "DRY_AUDIT", "REFLECT"} <= seen
    assert all(spend.spent(paths.home(n), clock.today()) == 0 for n in ("opus", "mira", "aria"))


def test_the_demo_queues_no_review_and_waits_while_a_review_gate_is_open(civ: Path) -> None:
    """`citizen demo` asks no one to review: the announcement's doorbell does. It stops
    the reviewers' daemons only once no REVIEW gate would open."""
    assert all("review" not in t.lower() for t in (*demo.TASKS.values(), demo.EVOLVE))
    assert not any(map(demo.owes_review, demo.CITIZENS))
    cid = announce(civ)
    assert [demo.owes_review(n) for n in ("opus", "mira", "aria")] == [False, True, True]
    for peer in ("mira", "aria"):
        reported(peer, cid, "worked", "tests pass")
    assert demo.owes_review("mira") and demo.owes_review("aria")  # adopt or hold out
    run("mira", "code_adopt", change_id=cid)
    run("aria", "code_decline", change_id=cid, reason="mine is fine")
    assert not any(map(demo.owes_review, demo.CITIZENS))


def reviewer_model(body: dict[str, Any]) -> dict[str, Any]:
    """A model behind the broker answering what a REVIEW wake asks (`routing`): after the
    wake's own test run, "worked" when the schema offers it, else "failed"; adopt."""
    return routing(body, lambda t: t.startswith("code_")) or text("nothing else to do")


def test_daemons_review_and_merge_an_announced_change_with_no_task_queued(
        civ: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = reviewer_model
    env = daemon_env(civ, messages_api)
    # No scheduled wake within the test: every wake here is one a doorbell rang.
    daemons = [start(env, name, "--interval", "3600", "--first-wake", "3600")
               for name in ("opus", "mira", "aria")]
    try:
        commit(git.Repo(civ / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hello'")},
               "warmer greeting")
        cli(env, "tool", "opus", "code_announce", json.dumps({
            "description": "warmer greeting", "expected_outcome": "greet() says hello"}))
        evolution = Evolution(civ / "shared", ["aria", "mira", "opus"], False)
        wait_for(lambda: evolution.changes()[0].status == "merged", timeout=180, every=0.5)
    finally:
        for d in daemons:
            d.terminate()
        for d in daemons:
            d.wait(timeout=60)
    (change,) = evolution.changes()
    assert {"mira", "aria"} <= set(change.reports)  # both tested and reported it
    assert len(change.holders()) >= evolution.quorum()
    assert "'hello'" in (civ / "shared" / "baseline" / "app.py").read_text()
    for name in ("mira", "aria"):
        assert all(TaskQueue(paths.home(name).tasks).ids(s) == [] for s in ("queue", "done"))


def test_what_test_it_runs_is_the_operators(
        civ: Path, rules_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: a reviewer makes its reports say what it likes by choosing what "test
    it" runs (`true`) - in its ~/code/templates, or its config.json on a server. Neither
    counts; the operator's /etc/experience/<name>.json does, and the wake runs that."""
    code_tpl, release = tmp_path / "code-templates", tmp_path / "release-templates"
    shutil.copytree(paths.templates_dir(), code_tpl)
    shutil.copytree(paths.templates_dir(), release)
    configs = json.loads((code_tpl / "citizen_configs.json").read_text())
    configs["defaults"]["evolution"] = {"test_command": "true"}
    (code_tpl / "citizen_configs.json").write_text(json.dumps(configs))
    monkeypatch.setenv("EXPERIENCE_TEMPLATES", str(code_tpl))  # its own ~/code's templates
    monkeypatch.setenv("EXPERIENCE_RULES_DIR", str(release))  # the unit's: the release
    paths.citizen_config_file("mira").write_text(json.dumps(
        {"evolution": {"test_command": "true"}}))
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)  # a server
    assert code.test_command(config.load_citizen("mira")) == code.TEST_COMMAND

    (rules_dir / "mira.json").write_text(json.dumps(
        {"evolution": {"test_command": "echo the operator chose this; exit 3"}}))
    assert code.test_command(config.load_citizen("mira")) == (
        "echo the operator chose this; exit 3")
    announce(civ)
    agent = Reviewer(outcome="failed")
    assert review("mira", agent).status == "ok"
    assert "the operator chose this" in agent.prompts[0]  # what ran, in the sandbox
    assert "tests FAILED (exit 3)" in agent.prompts[0] and agent.offered == [
        ["failed", "unclear"]]


def test_the_demo_makes_opuss_change_when_its_model_did_not(civ: Path) -> None:
    """The demo's stand-in for a model that did not carry the change through: the line
    committed as opus and announced by the tool's command - so the reviewers' doorbells
    ring as the model's announcement would have rung them, and no task is queued."""
    demo._make_the_change(civ)
    (change,) = civilization.commons().evolution.changes()
    assert change.citizen == "opus" and change.files == ["README.md"]
    repo = git.Repo(civ / "opus" / "code")
    assert demo.EVOLVED in (civ / "opus" / "code" / "README.md").read_text()
    assert repo.head.commit.author.name == "opus" and not repo.is_dirty()
    for peer in ("mira", "aria"):
        (ring,) = doorbell.drain(paths.home(peer).doorbell)
        assert ring.wake_type == "REVIEW" and change.id in ring.reason
    assert [demo.owes_review(n) for n in demo.CITIZENS] == [False, True, True]
    assert all(TaskQueue(paths.home(n).tasks).ids("queue") == [] for n in demo.CITIZENS)
