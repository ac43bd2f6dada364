"""REVIEW wakes: the evolution loop's own work, open only when the commons shows some.

The gate reads the records alone (no model): peers' changes this citizen has not
reported on, verified changes it has neither adopted nor declined, peers' dynamic tools
and library modules waiting for its review, open DRY violations in its own code.
Nothing waiting: an idle wake at $0.00.
`code_announce` rings every peer for this wake, and the report that verifies a change
rings those who lack it; its slot in `wake_allocations.json` catches whatever a ring
missed. A kind of its own, not the CODE wake's gate: CODE carries out a queued task
(claimed, verified, filed), while this work has no task - it is derived afresh from
the records every time, so it can never disagree with them.

Mechanical first, the model judges: for a change to test, the wake itself runs the
tests (`code_test`, sandboxed) and asks the model one structured question - what did
you see? - with the result in the prompt, then files the report itself; for a verified
change, one question - adopt or decline? - and the wake adopts or declines. A small
model fills a schema reliably where it rarely carries a free tool loop through three
calls in order. Tools, library modules and DRY violations need judgement and edits:
they keep the tool loop.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from citizen import civilization
from citizen.config import paths
from citizen.errors import LimitReached, ProviderError, StructuredOutputError
from citizen.home import state
from citizen.home.spend import DailyCapReached
from citizen.tools.base import ToolEnv
from citizen.tools.code import (
    code_adopt,
    code_decline,
    code_report_outcome,
    code_test,
    test_command,
)
from citizen.wake.loop import perform
from citizen.wake.meter import Ending
from citizen.wake.types.base import Ask, Gate, Setup, WakeType
from shared import clock, records
from shared.changes import Change

SHOWN = "review_items_shown"  # item -> how many REVIEW wakes have shown it
# Why: a model that cannot finish an item (no sandbox to test in, a conflict it cannot
# resolve) would reopen a paid wake for it at every slot and ring; after this many
# showings the item no longer opens the gate (it stays listed by code_pending_reviews).
MAX_SHOWINGS = 3
# Why: peers write these descriptions, as many and as long as they like: the prompt
# names a bounded number of items, each clipped.
MAX_ITEMS, TEXT_CHARS = 8, 200
BY_AUTHOR = "review_authors_today"  # {"day": ISO date, "wakes": {author: REVIEW wakes}}
# Why: a peer decides how many items it files against this citizen (changes, tools,
# modules, DRY violations naming its ~/code), and each opens a paid wake MAX_SHOWINGS
# times: one peer's items open the gate on at most this many wakes a day, and one wake
# names at most ITEMS_PER_AUTHOR of them (so a flood cannot crowd out other peers' work).
WAKES_PER_AUTHOR_PER_DAY, ITEMS_PER_AUTHOR = 4, 3
Items = dict[str, tuple[str, str]]  # item key -> (its author, its prompt line)
# Item kinds the wake carries out in steps (one structured question each); the rest go
# to the tool loop.
STEPPED = ("test", "adopt")
RESULT_CHARS = 2500  # the tail of a test run the model reads (pytest's summary is last)
# One structured question on evidence the wake gathered (a test run, the reviewers'
# reports): the fast seat answers it - a thousand adopters' questions on the primary
# seat cost five times as much for a choice between two words (issue 43's bench).
STEP_TIER = "fast"


def _clip(text: object) -> str:
    return " ".join(str(text).split())[:TEXT_CHARS]


def _change(c: Change, verb: str) -> str:
    return (f"- change {c.id} by {c.citizen} ({', '.join(c.files[:5])}): "
            f"{_clip(c.description)} [expected: {_clip(c.expected_outcome)}] - {verb}")


def _in_my_code(violation: dict[str, Any], me: str) -> bool:
    """Whether an open DRY violation is in this citizen's code: its location names this
    citizen's `~/code`, or names no citizen's and its own DRY_AUDIT found it (the record's
    author, from the file's owner - never what the record says)."""
    where = str(violation.get("location", ""))
    named = [c for c in civilization.citizens() if str(paths.home(c).code) in where]
    return me in named if named else violation.get(records.AUTHOR) == me


def work_items(setup: Setup) -> Items:
    """What waits for this citizen, from the records alone: item key -> (the peer whose
    record asks for it - the file's owner, never what a record says -, its prompt line)."""
    me, cfg = setup.home.name, setup.config
    commons = civilization.commons(setup.templates, approvals=cfg.library_approvals)
    items: Items = {}
    # Why: testing and adopting run git in ~/code; without that repository a citizen
    # has no code tools, so a change is nothing it can act on.
    if (setup.home.code / ".git").exists():
        evo = commons.evolution
        for c in evo.pending_reviews(me):
            items[f"test:{c.id}"] = c.citizen, _change(
                c, "test it (code_test) and report what you saw (code_report_outcome)")
        # Why: adopting changes the code this citizen runs - only with the operator's grant.
        if code_adopt.allowed(cfg):
            for c in evo.to_adopt(me):
                items[f"adopt:{c.id}"] = c.citizen, _change(
                    c, "verified by peers: adopt it (code_adopt) or hold out (code_decline)")
        for v in commons.dry.violations("open"):
            if _in_my_code(v, me):
                items[f"dry:{v['id']}"] = str(v[records.AUTHOR]), (
                    f"- DRY violation {v['id']} at {_clip(v['location'])}: "
                    f"{_clip(v['description'])} [fix: {_clip(v['fix'])}] - fix it in your "
                    "code, commit, then mark it fixed (dry_violation_fixed)")
    for t in commons.tools.awaiting(me):
        items[f"tool:{t['name']}"] = t["author"], (f"- dynamic tool {t['name']} by {t['author']}: "
                                      f"{_clip(t['description'])} - review it (tool_review)")
    for m in commons.library.awaiting(me):
        items[f"module:{m['id']}:{m['version']}"] = m["maintainer"], (
            f"- library module {m['id']} v{m['version']} by {m['maintainer']}: "
            f"{_clip(m['summary'])} - review it (library_review)")
    return items


def _wakes_today(marks: dict[str, Any]) -> Counter[str]:
    """How many of today's REVIEW wakes each author's items opened (a new day: none)."""
    mark = marks.get(BY_AUTHOR) or {}
    if mark.get("day") != clock.today().isoformat():
        return Counter()
    return Counter({str(a): int(n) for a, n in dict(mark.get("wakes", {})).items()})


class ReviewWake(WakeType):
    name = "REVIEW"
    required_tools = ("tool_review", "library_review", "dry_violation_fixed",
                      "str_replace_file")

    def gate(self, setup: Setup) -> Gate:
        shown = setup.marks.get(SHOWN, {})
        items = work_items(setup)
        spent = _wakes_today(setup.marks)
        taken: Counter[str] = Counter()
        open_: dict[str, str] = {}
        for key, (author, line) in items.items():
            if int(shown.get(key, 0)) >= MAX_SHOWINGS or taken[author] >= ITEMS_PER_AUTHOR:
                continue
            if author != setup.home.name and spent[author] >= WAKES_PER_AUTHOR_PER_DAY:
                continue
            taken[author] += 1
            open_[key] = line
        if not open_:
            why = (f"{len(items)} items were shown {MAX_SHOWINGS} times already, or their "
                   f"authors used today's {WAKES_PER_AUTHOR_PER_DAY} wakes" if items
                   else "no peer's work waits for my review or adoption")
            return Gate(False, why)
        kinds = sorted({k.split(":")[0] for k in open_})
        return Gate(True, f"{len(open_)} items wait for me ({', '.join(kinds)})",
                    {"items": open_, "all": sorted(items),
                     "authors": {k: items[k][0] for k in open_}})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        items: dict[str, str] = gate.data["items"]
        named = list(items)[:MAX_ITEMS]
        gate.data["named"] = named
        # Counted for the items still waiting only: the mark never outgrows the records.
        old: dict[str, Any] = setup.marks.get(SHOWN, {})
        counts = {k: int(old.get(k, 0)) + int(k in named) for k in gate.data["all"]}
        state.mark(setup.home, SHOWN, {k: n for k, n in counts.items() if n})
        spent = _wakes_today(setup.marks)
        spent.update(set(gate.data["authors"][k] for k in named))  # one wake each
        state.mark(setup.home, BY_AUTHOR, {"day": clock.today().isoformat(),
                                           "wakes": dict(spent)})
        return self._prompt(setup, gate, named)

    def _prompt(self, setup: Setup, gate: Gate, named: list[str]) -> str:
        items: dict[str, str] = gate.data["items"]
        work = "\n".join(items[k] for k in named)
        if len(items) > MAX_ITEMS:
            work += f"\n(and {len(items) - MAX_ITEMS} more, for a later wake)"
        return setup.templates.wake_prompt(self.name, work=work)

    def steps(self, setup: Setup, gate: Gate, env: ToolEnv, ask: Ask,
              instruction: str) -> str | Ending:
        named: list[str] = gate.data["named"]
        done: list[str] = gate.data.setdefault("done", [])
        adopts = [k for k in named if k.startswith("adopt:")]
        # Every verified change waiting is one question, asked once (one call, not one
        # per change): the adopters' whole cost of a change (issue 43).
        steps: list[tuple[str, Any]] = [(k, _test) for k in named if k.startswith("test:")]
        if len(adopts) == 1:
            steps.append((adopts[0], _adopt))
        elif adopts:
            steps.append(("adopt:" + ",".join(k.split(":", 1)[1] for k in adopts), _adopt_all))
        for key, step in steps:
            cid = key.split(":", 1)[1]
            try:
                line = gate.data["items"].get(key) or "\n".join(
                    gate.data["items"][k] for k in adopts)
                done.append(f"{cid}: {step(setup, env, ask, cid, line)}")
            except LimitReached as exc:  # the wake's or the day's cap: nothing more is asked
                return Ending("daily_cap" if isinstance(exc, DailyCapReached) else "budget",
                              str(exc), "; ".join(done))
            except (ProviderError, StructuredOutputError) as exc:
                # The model could not answer, or its answer broke the schema: no report is
                # filed; the item stays for a later wake (MAX_SHOWINGS bounds the retries).
                why = f"{type(exc).__name__}: {exc}"[:300]
                env.event("review_step_failed", item=key, reason=why)
                done.append(f"{cid}: no answer ({type(exc).__name__})")
        rest = [k for k in named if k.split(":")[0] not in STEPPED]
        if not rest:
            return Ending("end_turn", text="; ".join(done) or "nothing to do")
        return self._prompt(setup, gate, rest)

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        return f"review {ending.status}: {(ending.text or ending.reason)[:200]}"


def _test(setup: Setup, env: ToolEnv, ask: Ask, cid: str, line: str) -> str:
    """Run the tests on change `cid`, ask what they showed, file the report."""
    output, error = perform(code_test, env, {"change_id": cid})
    ran = not error and output.startswith("tests passed")
    # Why: a report may not contradict the evidence - when the tests failed or could not
    # run, "worked" is not offered (the schema's enum lacks it, so a grammar-constrained
    # model cannot even write it), and an answer that says it anyway is refused below.
    outcomes = ["worked", "failed", "unclear"] if ran else ["failed", "unclear"]
    prompt = setup.templates.prompt(
        "review_outcome", change=line, result=output[-RESULT_CHARS:],
        command=test_command(setup.config), outcomes=", ".join(outcomes))
    data = ask(prompt, setup.templates.schema("review_outcome", outcomes=outcomes),
               "review_outcome", max_tokens=300, tier=STEP_TIER)
    outcome, note = str(data.get("outcome")), str(data.get("note", ""))
    if outcome not in outcomes:
        env.event("review_refused", change=cid, outcome=outcome, offered=outcomes,
                  reason="the answer contradicts the test run")
        return f"refused a report '{outcome}' the tests do not support"
    verdict = output.splitlines()[0] if output else "no output"
    result, error = perform(code_report_outcome, env, {
        "change_id": cid, "outcome": outcome, "note": f"{note} [{verdict[:120]}]"})
    env.event("review_step", item=f"test:{cid}", outcome=outcome, filed=not error)
    return f"reported {outcome}" if not error else f"report refused: {result[:120]}"


def _reports(change: Change) -> str:
    return "\n".join(f"- {who}: {r.get('outcome')} - {_clip(r.get('note', ''))}"
                     for who, r in sorted(change.reports.items())) or "(none)"


def _adopt_all(setup: Setup, env: ToolEnv, ask: Ask, cids: str, lines: str) -> str:
    """Ask once whether to adopt each of several verified changes; adopt or decline each."""
    evolution = civilization.commons(setup.templates).evolution
    ids = cids.split(",")
    text = "\n\n".join(f"{line}\n{_reports(evolution.get(cid))}"
                         for cid, line in zip(ids, lines.splitlines(), strict=True))
    prompt = setup.templates.prompt("review_adopt_batch", changes=text,
                                    focus=setup.config.focus or "(none set)")
    data = ask(prompt, setup.templates.schema("review_adopt_batch", changes=ids),
               "review_adopt", max_tokens=150 * len(ids) + 100, tier=STEP_TIER)
    said = []
    for cid in ids:
        got = data.get(cid)
        answer: dict[str, Any] = got if isinstance(got, dict) else {}
        decision, reason = str(answer.get("decision")), str(answer.get("reason", ""))
        said.append(f"{cid} {_decide(env, cid, decision, reason)}")
    return "; ".join(said)


def _decide(env: ToolEnv, cid: str, decision: str, reason: str) -> str:
    """Carry out an adopt-or-decline answer on change `cid`."""
    if decision == "adopt":
        result, error = perform(code_adopt, env, {"change_id": cid})
    elif decision == "decline":
        result, error = perform(code_decline, env, {"change_id": cid,
                                                     "reason": reason or "no reason given"})
    else:
        env.event("review_refused", change=cid, decision=decision, reason="not offered")
        return f"refused a decision '{decision}'"
    env.event("review_step", item=f"adopt:{cid}", decision=decision, done=not error)
    done = "adopted" if decision == "adopt" else "declined"
    return done if not error else f"{decision} failed: {result[:120]}"


def _adopt(setup: Setup, env: ToolEnv, ask: Ask, cid: str, line: str) -> str:
    """Ask whether to adopt verified change `cid`; adopt or decline it."""
    change = civilization.commons(setup.templates).evolution.get(cid)
    prompt = setup.templates.prompt("review_adopt", change=line, reports=_reports(change),
                                    focus=setup.config.focus or "(none set)")
    data = ask(prompt, setup.templates.schema("review_adopt"), "review_adopt", max_tokens=300,
               tier=STEP_TIER)
    return _decide(env, cid, str(data.get("decision")), str(data.get("reason", "")))
