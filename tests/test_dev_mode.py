"""A dev mode that evolves: `citizen init` makes the baseline a git repository of the
checkout and each ~/code its clone, daemons run their own code, and a citizen beyond
the templates can be added.

The finding on the old code: `citizen init` left ~/code and shared/baseline empty, so
every dev daemon ran the checkout, the code_* tools had no repository, and
`citizen init c01` failed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
from click.testing import CliRunner

from citizen import config
from citizen.cli import cli
from citizen.config import paths
from tests.anthropic_server import MessagesServer
from tests.daemons import daemon_env, start


def test_init_makes_the_baseline_a_repository_and_each_code_its_clone(civ_root: Path) -> None:
    result = CliRunner().invoke(cli, ["init"])
    assert result.exit_code == 0, result.output
    baseline = git.Repo(civ_root / "shared" / "baseline")
    assert baseline.active_branch.name == "main"
    assert baseline.commit("release") == baseline.head.commit  # as setup_server.sh makes it
    assert "citizen/wake/flow.py" in [b.path for b in baseline.head.commit.tree.traverse()
                                      if isinstance(b, git.IndexObject)]
    assert not (civ_root / "shared" / "baseline" / ".venv").exists()  # .gitignore holds
    for name in ("opus", "mira", "aria"):
        code = git.Repo(civ_root / name / "code")
        assert code.head.commit == baseline.head.commit
        assert code.remotes.origin.url == str(civ_root / "shared" / "baseline")
        assert code.config_reader().get_value("user", "name") == name
    # The code tools now have a repository: a change is announced from it.
    (civ_root / "opus" / "code" / "NOTES.md").write_text("a change\n")
    subprocess.run(["git", "-C", str(civ_root / "opus" / "code"), "add", "NOTES.md"], check=True)
    subprocess.run(["git", "-C", str(civ_root / "opus" / "code"), "commit", "-qm", "notes"],
                   check=True)
    announced = CliRunner().invoke(cli, ["tool", "opus", "code_announce",
                                         '{"description": "notes", "expected_outcome": "ok"}'])
    assert announced.exit_code == 0 and '"pending"' in announced.output, announced.output
    again = CliRunner().invoke(cli, ["init"])
    assert "(already complete)" in again.output  # nothing overwritten


def test_init_adds_a_citizen_the_templates_do_not_know(civ_root: Path) -> None:
    refused = CliRunner().invoke(cli, ["init", "c01"])
    assert refused.exit_code != 0 and "--focus Testing --email" in refused.output
    made = CliRunner().invoke(cli, ["init", "c01", "--focus", "Testing", "--email",
                                    "c01@example.org"])
    assert made.exit_code == 0, made.output
    cfg = config.load_citizen("c01")
    assert (cfg.focus, cfg.email) == ("Testing", "c01@example.org")
    assert (civ_root / "c01" / "code" / ".git").is_dir()


def test_a_dev_daemon_wakes_in_its_own_code(civ_root: Path,
                                            messages_api: MessagesServer) -> None:
    """What a citizen evolves is what it runs: a change in its ~/code reaches its wakes."""
    assert CliRunner().invoke(cli, ["init", "opus"]).exit_code == 0
    marker = civ_root / "ran-from-own-code"
    init = paths.home("opus").code / "citizen" / "__init__.py"
    init.write_text(init.read_text() + f"\nopen({str(marker)!r}, 'w').close()\n")
    daemon = start(daemon_env(civ_root, messages_api), "opus", "--max-wakes", "1",
                   "--interval", "3600", "--first-wake", "0.1")
    out, _ = daemon.communicate(timeout=120)
    assert daemon.returncode == 0, out
    assert marker.exists(), out  # the wake imported opus's code, not the checkout
