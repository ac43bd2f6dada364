"""Every test runs in its own civilization root; secrets and overrides never leak in."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from citizen.config import paths
from tests.anthropic_server import MessagesServer

# The real-browser fixtures (`browser`, `served`) for the dashboard's page tests; a real
# PostgreSQL (`cluster`, `database`) for the several-servers engines, and two servers'
# brokers on it (`sites`).
pytest_plugins = ("tests.browser", "tests.postgres", "tests.several")

_ISOLATED = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
             "EXPERIENCE_PROVIDER", "EXPERIENCE_LOCAL_URL", "EXPERIENCE_TEMPLATES", "EMAIL_PASS",
             "EXPERIENCE_RULES_DIR",
             "EXPERIENCE_CLOCK", "EXPERIENCE_BACKUP_REPO", "EXPERIENCE_BACKUP_KEY",
             "EXPERIENCE_BROKER_SOCKET", "EXPERIENCE_BROKER_STATE")


@pytest.fixture(autouse=True)
def civ_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point CIV_ROOT at a fresh directory (the model cache stays shared: it is 253 MB)."""
    root = tmp_path / "civ"
    root.mkdir()
    monkeypatch.setenv("CIV_ROOT", str(root))
    for key in _ISOLATED:
        monkeypatch.delenv(key, raising=False)
    yield root
    stop_broker(root)


def stop_broker(root: Path) -> None:
    """End the dev-mode broker a test's model call started (citizen.access.client)."""
    pidfile = root / ".broker" / "broker.pid"
    with contextlib.suppress(OSError, ValueError):  # none was started, or it has gone
        os.kill(int(pidfile.read_text(encoding="utf-8")), signal.SIGTERM)


@pytest.fixture
def messages_api() -> Iterator[MessagesServer]:
    """A local server speaking the Anthropic Messages API."""
    server = MessagesServer().start()
    yield server
    server.stop()


@pytest.fixture
def civ(civ_root: Path) -> Path:
    """A dev-mode civilization with opus, mira and aria."""
    from citizen.admin import founding

    founding.init(["opus", "mira", "aria"])
    return civ_root


@pytest.fixture
def own_code(civ: Path) -> Path:
    """opus's ~/code: a git clone of a baseline made from this checkout's HEAD."""
    project = paths.project_dir()
    archive = subprocess.run(["git", "-C", str(project), "archive", "HEAD"], check=True,
                             capture_output=True).stdout
    baseline = civ / "shared" / "baseline"
    baseline.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(baseline, filter="data")
    repo = git.Repo.init(baseline, initial_branch="main")
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "baseline", env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
                                                 "GIT_COMMITTER_NAME": "t",
                                                 "GIT_COMMITTER_EMAIL": "t@x"})
    code = civ / "opus" / "code"
    code.rmdir()
    clone = git.Repo.clone_from(str(baseline), code)
    with clone.config_writer() as cw:
        cw.set_value("user", "name", "opus").set_value("user", "email", "opus@x")
    return code


@pytest.fixture
def rules_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's directory (/etc/experience on a server), empty, in this test's tmp."""
    folder = tmp_path / "etc-experience"
    folder.mkdir()
    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(folder))
    return folder
