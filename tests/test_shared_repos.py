"""The shared repositories change only through reviewed paths (issue 28, breaks 3 and 4).

Each test performs an attack a citizen could make on the code before this change and
fails there: a command the stakes rated low that runs code or reads a peer's secrets,
a hook or config planted in the baseline or world repository, a commit straight onto
the baseline's main, a merge without the adoptions it needs. Dev mode: the broker is
a child process under CIV_ROOT/.broker, the same code paths as on a server minus the
Unix users (tests/test_hostile_repos_server.py has those).
"""

from __future__ import annotations

import pytest

from shared.consensus.stakes import classify, command_stakes


@pytest.mark.parametrize("command", [
    "sort --compress-program=sh notes.md",  # sort runs sh to "compress" its temp files
    "sort --compress-program sh -S 1 notes.md", "sort --comp=sh notes.md",
    "sort -uo notes.md notes.md", "sort -ruo README.md x", "sort --out=README.md x",
    "git log --out=README.md", "tree -ao README.md",
    "cat /etc/experience/opus.env", "cat ../../opus/.env", "head ~/.env",
    "grep -r KEY /home/mira", "cat $HOME/.env", "grep --file=/etc/shadow x",
    "./cat notes.md", "/tmp/x/ls",  # a program by path is not the program it names
])
def test_commands_that_run_code_write_or_read_outside_are_high(command: str) -> None:
    """Break 3: each was low (2/3 agree, no person) on the code before."""
    assert command_stakes(command)[0] == "high", command_stakes(command)
    assert classify([{"tool": "run", "args": {"command": command}}])[0] == "high"


@pytest.mark.parametrize("command", ["sort -n notes.md", "sort -t, -k2 data.csv",
                                     "cat notes/a.md", "git log --oneline -3", "ls -la"])
def test_reading_inside_the_world_stays_low(command: str) -> None:
    assert command_stakes(command)[0] == "low", command_stakes(command)
