"""Core tools against a hostile citizen (issue 28): a flood of output stays bounded, and
the file tools stay in the citizen's home - in dev mode too."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from citizen.tools import ToolFailure, core_tools, shell
from citizen.tools.base import ToolEnv
from tests.scripts import tool_env

FLOOD = 200_000_000  # bytes a command prints
KEPT = 128 * 1024  # the first 64 KiB and the last 64 KiB of it


@pytest.fixture
def env(civ: Path) -> ToolEnv:
    return tool_env("opus")


def test_a_flood_of_output_is_read_to_a_cap_never_held_whole(env: ToolEnv) -> None:
    before = psutil.Process().memory_info().rss
    code, out = shell.run(env, f"printf start; head -c {FLOOD} /dev/zero | tr '\\0' x; "
                               "printf end", timeout=120)
    grew = psutil.Process().memory_info().rss - before
    assert code == 0
    assert len(out) < KEPT + 100
    assert out.startswith("startxxx") and out.endswith("xxxend")
    assert f"… {FLOOD + len('startend') - KEPT} bytes discarded …" in out
    assert grew < 50_000_000, f"the reader grew by {grew} bytes"


def test_a_command_that_keeps_its_output_open_still_times_out(env: ToolEnv) -> None:
    with pytest.raises(ToolFailure, match="timed out after 1 s"):
        shell.run(env, "printf partial; sleep 30", timeout=1)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A developer's file outside the civilization (its ~/.ssh/id_ed25519)."""
    ssh = tmp_path / "dev-home" / ".ssh"
    ssh.mkdir(parents=True)
    key = ssh / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY----- canary")
    return key


def test_file_tools_stay_in_the_home_in_dev_mode(env: ToolEnv, outside: Path) -> None:
    read, write = core_tools()["read_file"], core_tools()["write_file"]
    home = env.home.dir
    depth = len(home.resolve().parts) - 1
    dotdot = "/".join([".."] * depth) + str(outside)
    (home / "innocent").symlink_to(outside)
    (home / "dir-link").symlink_to(outside.parent)
    for path in (str(outside), dotdot, "innocent", "dir-link/id_ed25519", "~/../../etc/hostname",
                 "/etc/hostname"):
        with pytest.raises(ToolFailure, match="outside your home") as info:
            read.run(env, {"path": path})
        assert "canary" not in str(info.value)
    for path in ("innocent", "dir-link/new"):
        with pytest.raises(ToolFailure, match="outside your home"):
            write.run(env, {"path": path, "content": "x"})
    assert outside.read_text().endswith("canary") and not (outside.parent / "new").exists()
    (home / "notes").mkdir(exist_ok=True)
    (home / "notes" / "ok.md").write_text("mine")
    (home / "notes" / "alias").symlink_to(home / "notes" / "ok.md")  # inside: fine
    assert read.run(env, {"path": "notes/alias"}) == "mine"
    assert read.run(env, {"path": str(home / "notes" / "ok.md")}) == "mine"
