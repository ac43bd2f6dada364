"""The debate rules hold whatever the participants do: a hypothesis state machine of
adversarial participants making random moves (any type, any stage, any turn, any
target, vague falsifiers, self-grades), honest moves, and crashes between a move and
its events, checked after every step against an oracle written here."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shared.debates import ALL_MOVES, GRADES, SIDES, Debate, Debates, IllegalMove
from tests.debating import FALSIFIER, play

PEOPLE = ["opus", "mira", "aria"]
BUDGETS = {"DISCOVERY": (2, 4), "CRUX_LOCK": (3, 16), "EVIDENCE": (3, 8)}
VAGUE = {"metric": "Probably the share", "threshold": "soon", "deadline": "later"}


def move_strategy() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "move": st.sampled_from(ALL_MOVES),
        "content": st.sampled_from(["", "a point", "F1: 7% reverted"]),
        "target": st.sampled_from([*PEOPLE, "zed"]),
        "side": st.sampled_from([*SIDES, "MAYBE"]),
        "grade": st.sampled_from([*GRADES, "GREAT"]),
        "question": st.sampled_from(["", "Will it pass 40% by 2030?", "what now"]),
        "falsifier": st.sampled_from([FALSIFIER, VAGUE]),
        "top_claim": st.sampled_from([{"statement": "x", "side": "YES"},
                                      {"statement": "", "side": "NO"}]),
    })


class DebateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="debate-sm-"))
        self.debates = Debates(self.tmp / "shared", PEOPLE, enforce_identity=False)
        self.did = self.debates.start("Tests before features", PEOPLE, "operator",
                                      budgets=BUDGETS).id
        self.crashed = False

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(author=st.sampled_from([*PEOPLE, "zed"]), move=move_strategy())
    def adversarial_move(self, author: str, move: dict[str, Any]) -> None:
        try:
            self.debates.move(self.did, author, move)
            self.crashed = False
        except IllegalMove:
            pass

    @rule(move=move_strategy())
    def adversarial_in_turn(self, move: dict[str, Any]) -> None:
        """The participant whose turn it is tries anything at all."""
        d = self.debates.load(self.did)
        if d.active:
            self.adversarial_move(d.owed_by(), move)

    adversarial_in_turn_2 = adversarial_in_turn

    @rule()
    def honest_move(self) -> None:
        d = self.debates.load(self.did)
        if d.active:
            who = d.owed_by()
            self.debates.move(self.did, who, play(d.situation(who)))
            self.crashed = False

    honest_move_2 = honest_move_3 = honest_move

    @rule()
    def crash_after_writing(self) -> None:
        """A daemon dies after writing its move file, before logging its events."""
        d = self.debates.load(self.did)
        if not d.active:
            return
        who = d.owed_by()
        move = {**play(d.situation(who)), "author": who, "seq": d.seq + 1}
        folder = self.debates.dir / self.did / "moves"
        folder.mkdir(exist_ok=True)
        (folder / f"{d.seq + 1:04d}-{who}.json").write_text(json.dumps(move))
        self.crashed = True

    @invariant()
    def the_rules_hold(self) -> None:
        d = self.debates.load(self.did)
        said = [m for m in d.messages if m["author"] != "moderator"]
        self._stages_and_budgets(d, said)
        self._steelmans_and_challenges(said)
        self._locks(d)
        posted = [e["seq"] for e in self.debates.events(self.did)
                  if e["type"] == "message_posted"]
        thread = [m["seq"] for m in said]
        assert posted == thread[:len(posted)], "the event log contradicts the thread"
        if not self.crashed:
            assert posted == thread, "the event log and the thread disagree"

    @staticmethod
    def _stages_and_budgets(d: Debate, said: list[dict[str, Any]]) -> None:
        allowed = {"DISCOVERY": {"CLAIM", "QUESTION", "PROPOSE_QUESTION", "TOP_CLAIM", "PASS"},
                   "CRUX_LOCK": {"COMMIT", "STEELMAN", "GRADE_STEELMAN", "FALSIFIER",
                                 "TOP_CLAIM", "PROPOSE_LOCK", "PASS"},
                   "EVIDENCE": {"EVIDENCE", "CHALLENGE", "STEELMAN", "GRADE_STEELMAN",
                                "CONCEDE", "TOP_CLAIM", "PASS"}}
        per_stage: dict[str, int] = {}
        for m in said:
            assert m["move"] in allowed[m["stage"]], m
            per_stage[m["stage"]] = per_stage.get(m["stage"], 0) + 1
            assert m["author"] in PEOPLE
        for stage, count in per_stage.items():
            assert count <= BUDGETS[stage][1], f"{stage}: {count} moves"

    @staticmethod
    def _steelmans_and_challenges(said: list[dict[str, Any]]) -> None:
        latest: dict[tuple[str, str], str] = {}
        pending: list[tuple[str, str]] = []
        for m in said:
            if m["move"] == "STEELMAN":
                assert m["target"] != m["author"]
                pending.append((m["author"], m["target"]))
            elif m["move"] == "GRADE_STEELMAN":
                author, target = pending.pop(0)
                assert m["author"] == target != author, "a steelman graded by anyone else"
                latest[(author, target)] = m["grade"]
            elif m["move"] == "PASS" and pending:
                latest[pending.pop(0)] = "UNGRADED"
            elif m["move"] == "CHALLENGE":
                assert latest.get((m["author"], m["target"])) == "ACCURATE", \
                    "a challenge before an ACCURATE steelman"

    def _locks(self, d: Debate) -> None:
        for e in d.events:
            if e["type"] != "lock_succeeded":
                continue
            upto = [m for m in d.messages if m["seq"] <= e["seq"] and m["author"] != "moderator"]
            sides: dict[str, str] = {}
            falsified: set[str] = set()
            steel: dict[tuple[str, str], str | None] = {}
            order: list[tuple[str, str]] = []
            for m in upto:
                if m["move"] in ("COMMIT", "CONCEDE"):
                    sides[m["author"]] = m["side"]
                if m.get("falsifier") and m["move"] in ("COMMIT", "FALSIFIER"):
                    falsified.add(m["author"])
                if m["move"] == "STEELMAN":
                    steel[(m["author"], m["target"])] = None
                    order.append((m["author"], m["target"]))
                if m["move"] in ("GRADE_STEELMAN", "PASS") and order and any(
                        v is None for v in steel.values()):
                    pair = next(p for p in order if steel[p] is None)
                    steel[pair] = m.get("grade", "UNGRADED")
            falsified |= set(e.get("derived", []))
            assert len(sides) >= 2 and {"YES", "NO"} <= set(sides.values())
            assert steel and all(g == "ACCURATE" for g in steel.values())
            assert set(sides) <= falsified, "locked without everyone's falsifier"


DebateMachine.TestCase.settings = settings(
    max_examples=120, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestDebateIntegrity = DebateMachine.TestCase
