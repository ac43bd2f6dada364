"""Structured debates among citizens: what a move is (`moves`: stages, moves, budgets,
the checks of a move's content, a concrete falsifier), the replayed state (`state`), the
rules (`rules`: the state machine - legal moves in turn, steelman-before-challenge, the
crux lock gate, a deterministic moderator), what a debate yields (`crux`: the crux, the
transcript), who grades too kindly (`grading`), and where debates live (`store`: the
threads of `shared/debates/<id>/`).
Each imports only those before it in this list."""

from shared.debates.crux import crux, transcript
from shared.debates.moves import (
    ALL_MOVES,
    BUDGETS,
    GRADES,
    MAX_PARTICIPANTS,
    MIN_PARTICIPANTS,
    MOVES,
    SIDES,
    STAGES,
    VAGUE,
    Falsifier,
    IllegalMove,
    Move,
    falsifier_problems,
    measurement_problem,
    scaled_budgets,
    vague_words,
)
from shared.debates.rules import Debate
from shared.debates.store import Debates

__all__ = ["ALL_MOVES", "BUDGETS", "GRADES", "MAX_PARTICIPANTS", "MIN_PARTICIPANTS", "MOVES",
           "SIDES", "STAGES", "VAGUE", "Debate", "Debates", "Falsifier", "IllegalMove", "Move",
           "crux", "falsifier_problems", "measurement_problem", "scaled_budgets", "transcript",
           "vague_words"]
