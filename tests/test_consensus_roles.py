"""Roles come from the rotation, never from the request: the request is its opener's own
file, and one naming its own verifier and integrator chose who judges it (collusion)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from shared.consensus import Consensus, rotation
from shared.errors import NotAllowed
from tests.thoughtworld import CITIZENS, HELLO, commons, proposal, vote


@pytest.fixture()
def c(tmp_path: Path) -> Consensus:
    return commons(tmp_path / "shared")


def test_a_request_naming_its_own_reviewers_gets_the_rotation(
        c: Consensus, caplog: pytest.LogCaptureFixture) -> None:
    """The attack: opus writes its request by hand, naming aria (its accomplice) verifier
    where the rotation says mira. On the code before, any three different citizens were
    accepted: aria's approval counted and mira was never asked."""
    pid = next(p for p in (f"prop-20990101T000000-{i:04x}" for i in range(1, 50))
               if rotation(p, "opus", CITIZENS)["verifier"] == "mira")
    chosen = {"executor": "opus", "verifier": "aria", "integrator": "mira"}
    c.threads.open({"task": HELLO, "requested_by": "opus", "source": {}, "roles": chosen}, pid)
    c.propose(pid, "opus", proposal())
    with caplog.at_level(logging.WARNING, logger="shared.consensus.reading"):
        d = c.load(pid)
    assert d.roles == rotation(pid, "opus", CITIZENS) and d.owed_by == "mira"
    assert any("not the rotation's" in r.getMessage() for r in caplog.records)
    with pytest.raises(NotAllowed):  # the accomplice cannot take the step
        c.verify(pid, "aria", vote())
    c.threads.write(pid, "verify-01.json", "aria", vote())  # nor write it by hand
    d = c.load(pid)
    assert d.phase == "verify" and not d.verifications and d.owed_by == "mira"
    assert c.roles(pid) == d.roles  # the episode checks (`_vouched`) use the same roles
