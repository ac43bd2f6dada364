"""What the dashboard's tests put in the store: the civilization's consensus, and a
proposal that waits for a person."""

from __future__ import annotations

from citizen import civilization, config
from shared.consensus import Consensus
from tests.thoughtworld import HELLO, proposal


def commons() -> Consensus:
    return civilization.consensus(config.templates())


def waiting(task: str = HELLO) -> str:
    """A proposal its verifier handed to a person: it waits for the operator."""
    c = commons()
    d = c.request(task, "opus", "operator")
    c.propose(d.id, "opus", proposal())
    c.give_up(d.id, c.load(d.id).roles["verifier"], "let a person decide")
    assert c.load(d.id).phase == "human"
    return d.id
