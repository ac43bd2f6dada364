"""Every test runs in its own civilization root; secrets and overrides never leak in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.anthropic_server import MessagesServer

_ISOLATED = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
             "EXPERIENCE_PROVIDER", "EXPERIENCE_LOCAL_URL", "EXPERIENCE_TEMPLATES", "EMAIL_PASS")


@pytest.fixture(autouse=True)
def civ_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point CIV_ROOT at a fresh directory (the model cache stays shared: it is 253 MB)."""
    root = tmp_path / "civ"
    root.mkdir()
    monkeypatch.setenv("CIV_ROOT", str(root))
    for key in _ISOLATED:
        monkeypatch.delenv(key, raising=False)
    return root


@pytest.fixture
def messages_api() -> Iterator[MessagesServer]:
    """A local server speaking the Anthropic Messages API."""
    server = MessagesServer().start()
    yield server
    server.stop()


@pytest.fixture
def civ(civ_root: Path) -> Path:
    """A dev-mode civilization with opus, mira and aria."""
    from citizen import civilization

    civilization.init(["opus", "mira", "aria"])
    return civ_root
