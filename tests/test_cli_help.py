"""`citizen --help` lists every command from its summary, importing none (issue 45, item 5:
it imported every command module for one line each, 0.49 s)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from citizen.cli import COMMANDS, SUMMARIES, _load, cli


def test_every_summary_is_its_commands_own_first_sentence() -> None:
    """A summary that drifted from its command's docstring fails here, naming it."""
    assert set(SUMMARIES) == set(COMMANDS)
    drifted = {name: _load(target).get_short_help_str(1000)
               for name, target in COMMANDS.items()
               if SUMMARIES[name] != _load(target).get_short_help_str(1000)}
    assert not drifted, f"update SUMMARIES in citizen/cli/__init__.py to: {drifted}"


def test_help_imports_no_command_module_and_lists_them_all() -> None:
    code = ("import sys\nfrom citizen.cli import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('citizen.cli.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    loaded = done.stdout.strip().splitlines()[-1]
    assert loaded == "['citizen.cli.terminal']", loaded
    for name in COMMANDS:
        assert f"\n  {name} " in done.stdout, name


def test_help_reads_as_when_every_command_was_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing from the summaries is click's own, line for line."""
    runner = CliRunner()
    fast = runner.invoke(cli, ["--help"], terminal_width=100).output
    monkeypatch.setattr("citizen.cli.SUMMARIES", {})  # every line from its loaded command
    assert runner.invoke(cli, ["--help"], terminal_width=100).output == fast
