"""The commons' handle lists the citizens' homes again only when the root has changed
(issue 33: every gate asks for the handle, and listing a thousand homes costs ~6 ms),
yet a new home is seen - even one whose config.json lands after the directory."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from citizen import civilization
from citizen.config import paths


def settle(root: Path) -> None:
    """The root as if its last change were ten seconds old."""
    past = time.time() - 10
    os.utime(root, (past, past))


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = civilization.citizens

    def counted() -> list[str]:
        calls.append(1)
        return real()

    monkeypatch.setattr(civilization, "citizens", counted)
    return calls


def test_the_homes_are_listed_once_while_the_root_is_unchanged(
        civ: Path, listings: list[int]) -> None:
    settle(civ)
    handles = [civilization.commons() for _ in range(5)]
    assert len(listings) == 1
    assert handles[-1].citizens == ["aria", "mira", "opus"]


def test_a_new_home_is_listed(civ: Path, listings: list[int]) -> None:
    settle(civ)
    civilization.commons()
    # A home made now, its config.json written a moment after the directory: the root
    # changed under two seconds ago, so each ask lists the homes again until it settles.
    zed = civ / "zed"
    zed.mkdir()
    assert "zed" not in civilization.commons().citizens
    shutil.copy(paths.home("opus").config, zed / "config.json")
    assert "zed" in civilization.commons().citizens
    settle(civ)
    assert "zed" in civilization.commons().citizens
    before = len(listings)
    assert "zed" in civilization.commons().citizens
    assert len(listings) == before  # settled and listed: not again
