"""Structured debates among citizens: what a move is (`moves`: stages, moves, budgets,
the checks of a move's content), the rules (`rules`: the state machine - legal moves in
turn, steelman-before-challenge, the crux lock gate, a deterministic moderator), what a
debate yields (`crux`: falsifiers, the crux, the transcript), and where debates live
(`store`: the threads of `shared/debates/<id>/`)."""

from shared.debates.crux import VAGUE, crux, falsifier_problems, transcript, vague_words
from shared.debates.moves import (
    ALL_MOVES,
    BUDGETS,
    GRADES,
    MAX_PARTICIPANTS,
    MIN_PARTICIPANTS,
    MOVES,
    SIDES,
    STAGES,
    Falsifier,
    IllegalMove,
    Move,
    scaled_budgets,
)
from shared.debates.rules import Debate
from shared.debates.store import Debates

__all__ = ["ALL_MOVES", "BUDGETS", "GRADES", "MAX_PARTICIPANTS", "MIN_PARTICIPANTS", "MOVES",
           "SIDES", "STAGES", "VAGUE", "Debate", "Debates", "Falsifier", "IllegalMove", "Move",
           "crux", "falsifier_problems", "scaled_budgets", "transcript", "vague_words"]
