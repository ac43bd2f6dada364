"""The debate rules hold whatever the participants do: a hypothesis state machine of
adversarial participants making random moves (any type, any stage, any turn, any
target, vague falsifiers, self-grades) and honest moves, checked after every step
against an oracle written here. It drives the pure rules in memory; a smaller machine
drives the same steps through the store (files, the lock, the event log) and adds
crashes between a move and its events."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shared.debates import ALL_MOVES, GRADES, SIDES, Debate, Debates, IllegalMove
from shared.debates.moves import FLIP, recorded
from tests.debating import FALSIFIER, play

PEOPLE = ["opus", "mira", "aria"]
BUDGETS = {"DISCOVERY": (2, 4), "CRUX_LOCK": (3, 16), "EVIDENCE": (3, 8)}
VAGUE = {"metric": "Probably the share", "threshold": "soon", "deadline": "later"}


CHOICES: dict[str, list[Any]] = {
    "move": list(ALL_MOVES),
    "by": [*PEOPLE, "zed"],  # who tries it (adversarial_move only)
    "content": ["", "a point", "F1: 7% reverted"],
    "target": [*PEOPLE, "zed"],
    "side": [*SIDES, "MAYBE"],
    "grade": [*GRADES, "GREAT"],
    "question": ["", "Will it pass 40% by 2030?", "what now"],
    "falsifier": [FALSIFIER, VAGUE],
    "top_claim": [{"statement": "x", "side": "YES"}, {"statement": "", "side": "NO"}],
    FLIP: [None, True, False, "yes"],  # None: not answered (recorded() drops it)
    "bears_on": ["", "F1", "F9"],
}


def _decode(n: int) -> dict[str, Any]:
    """One combination of CHOICES, by its number (mixed radix, the first field fastest)."""
    move = {}
    for key, options in CHOICES.items():
        n, k = divmod(n, len(options))
        move[key] = options[k]
    return move


COMBINATIONS = math.prod(len(v) for v in CHOICES.values())
# What a step is, weighted as the machine's rules always were: anyone tries anything (1),
# the participant in turn tries anything (2), the participant in turn plays honestly (3).
STEPS = ("adversarial_move", "adversarial_in_turn", "adversarial_in_turn", "honest_move",
         "honest_move", "honest_move")


class DebateMachine(RuleBasedStateMachine):
    """The pure rules: one `Debate` in memory, every accepted move kept for a replay."""

    def __init__(self) -> None:
        super().__init__()
        self.d = Debate("debate-20261123T000000-0000", "Tests before features", list(PEOPLE),
                        dict(BUDGETS))
        self.accepted: list[dict[str, Any]] = []
        self.crashed = False

    def _move(self, author: str, move: dict[str, Any]) -> None:
        body = recorded(move, author, self.d.seq + 1)
        seq = self.d.seq
        try:
            self.d.apply(body)
        except IllegalMove:
            assert self.d.seq == seq, "a refused move changed the state"
            raise
        self.accepted.append(body)

    def _state(self) -> Debate:
        return self.d

    def _posted(self) -> list[int]:
        return [e["seq"] for e in self.d.events if e["type"] == "message_posted"]

    def _try(self, author: str, move: dict[str, Any]) -> None:
        try:
            self._move(author, {k: v for k, v in move.items() if k != "by"})
            self.crashed = False
        except IllegalMove:
            pass

    @rule(n=st.integers(0, len(STEPS) * COMBINATIONS - 1))
    def step(self, n: int) -> None:
        """One step, drawn as one number (its kind and its move's fields): hypothesis then
        spends its time on the rules rather than on nine draws and a rule choice."""
        kind, move = STEPS[n % len(STEPS)], _decode(n // len(STEPS))
        if kind == "honest_move":
            self.honest_move()
        else:
            getattr(self, kind)(move)

    def adversarial_move(self, move: dict[str, Any]) -> None:
        """Anyone, participant or not, tries anything at all."""
        self._try(move["by"], move)

    def adversarial_in_turn(self, move: dict[str, Any]) -> None:
        """The participant whose turn it is tries anything at all."""
        d = self._state()
        if d.active:
            self._try(d.owed_by(), move)

    def honest_move(self) -> None:
        d = self._state()
        if d.active:
            who = d.owed_by()
            self._move(who, play(d.situation(who)))
            self.crashed = False

    @invariant()
    def the_rules_hold(self) -> None:
        d = self._state()
        said = [m for m in d.messages if m["author"] != "moderator"]
        self._stages_and_budgets(d, said)
        self._steelmans_and_challenges(said)
        self._locks(d)
        self._evidence(d, said)
        posted = self._posted()
        thread = [m["seq"] for m in said]
        assert posted == thread[:len(posted)], "the event log contradicts the thread"
        if not self.crashed:
            assert posted == thread, "the event log and the thread disagree"

    def teardown(self) -> None:
        """Every reader replaying the accepted moves derives the same debate."""
        again = Debate(self.d.id, self.d.topic, list(PEOPLE), dict(BUDGETS))
        for body in self.accepted:
            again.apply(body)
        assert again == self.d, "a replay of the moves derives another debate"

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

    @staticmethod
    def _evidence(d: Debate, said: list[dict[str, Any]]) -> None:
        """Evidence names a falsifier declared before it (ids are F1, F2 ... in order)."""
        for m in said:
            if m["move"] == "EVIDENCE":
                declared = [f for fs in d.falsifiers.values() for f in fs]
                assert m.get("bears_on") in {f["id"] for f in declared}, m
                assert int(m["bears_on"][1:]) <= len(declared)

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
            sided = {p: s for p, s in sides.items() if s in ("YES", "NO")}
            for p, side in sided.items():
                assert any(steel.get((p, q)) == "ACCURATE" for q, other in sided.items()
                           if other != side), f"locked without {p}'s steelman of the other side"
            answered = {m["author"]: m[FLIP] for m in upto
                        if m["move"] == "COMMIT" and isinstance(m.get(FLIP), bool)}
            assert set(sided) <= set(answered), "locked without everyone's flip answer"
            assert e["would_flip"] == {p: answered[p] for p in sided}


class DebateStoreMachine(DebateMachine):
    """The same steps end to end: moves written through `Debates.move` (the lock, the
    move files, the event log), the state replayed from disk, and crashes after a move
    file is written but before its events are logged."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="debate-sm-"))
        self.debates = Debates(self.tmp / "shared", PEOPLE, enforce_identity=False)
        self.did = self.debates.start("Tests before features", PEOPLE, "operator",
                                      budgets=BUDGETS).id

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _move(self, author: str, move: dict[str, Any]) -> None:
        self.debates.move(self.did, author, move)

    def _state(self) -> Debate:
        return self.debates.load(self.did)

    def _posted(self) -> list[int]:
        return [e["seq"] for e in self.debates.events(self.did)
                if e["type"] == "message_posted"]

    @rule()
    def crash_after_writing(self) -> None:
        """A daemon dies after writing its move file, before logging its events."""
        d = self._state()
        if not d.active:
            return
        who = d.owed_by()
        move = {**play(d.situation(who)), "author": who, "seq": d.seq + 1}
        folder = self.debates.dir / self.did / "moves"
        folder.mkdir(exist_ok=True)
        (folder / f"{d.seq + 1:04d}-{who}.json").write_text(json.dumps(move))
        self.crashed = True


DebateMachine.TestCase.settings = settings(
    max_examples=1200, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestDebateIntegrity = DebateMachine.TestCase
DebateStoreMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestDebateStoreIntegrity = DebateStoreMachine.TestCase
