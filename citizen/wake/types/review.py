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
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from citizen import civilization
from citizen.config import paths
from citizen.home import state
from citizen.tools.base import ToolEnv
from citizen.tools.code import code_adopt
from citizen.wake.meter import Ending
from citizen.wake.types.base import Gate, Setup, WakeType
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
    required_tools = ("code_test", "code_report_outcome", "code_adopt", "code_decline",
                      "tool_review", "library_review", "dry_violation_fixed",
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
        work = "\n".join(items[k] for k in named)
        if len(items) > MAX_ITEMS:
            work += f"\n(and {len(items) - MAX_ITEMS} more, for a later wake)"
        # Counted for the items still waiting only: the mark never outgrows the records.
        old: dict[str, Any] = setup.marks.get(SHOWN, {})
        counts = {k: int(old.get(k, 0)) + int(k in named) for k in gate.data["all"]}
        state.mark(setup.home, SHOWN, {k: n for k, n in counts.items() if n})
        spent = _wakes_today(setup.marks)
        spent.update(set(gate.data["authors"][k] for k in named))  # one wake each
        state.mark(setup.home, BY_AUTHOR, {"day": clock.today().isoformat(),
                                           "wakes": dict(spent)})
        return setup.templates.wake_prompt(self.name, work=work)

    def end(self, setup: Setup, env: ToolEnv, ending: Ending) -> str:
        return f"review {ending.status}: {(ending.text or ending.reason)[:200]}"
