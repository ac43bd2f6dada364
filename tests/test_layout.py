"""One module knows the commons' paths: `citizen init` and setup_server.sh make its list."""

from __future__ import annotations

import re
import stat

from citizen.admin import founding
from citizen.config import paths
from shared import layout
from shared.layout import Layout


def test_init_makes_the_layouts_directories_with_their_modes() -> None:
    founding.init_shared()
    root = paths.shared_dir()
    assert stat.S_IMODE(root.stat().st_mode) == layout.ROOT_MODE
    for sub, mode in layout.DIRS:
        assert stat.S_IMODE((root / sub).stat().st_mode) == mode, sub
    where = Layout(root)
    assert where.heartbeats.is_dir() and where.proposal_records.is_dir()
    assert paths.home("opus").heartbeat == where.heartbeat("opus")
    assert paths.home("opus").doorbell == where.doorbell("opus")


def test_setup_server_makes_the_same_directories() -> None:
    script = (paths.project_dir() / "scripts" / "setup_server.sh").read_text()
    loop = re.search(r'for d in "" (.*?); do', script, re.S)
    assert loop is not None
    made = set(loop.group(1).replace("\\\n", " ").split())
    assert "mode=3775" in script and "mode=2775" not in script  # issue 42: all sticky
    # The rooms' folder a citizen used to make is made or repaired through descriptors.
    assert "-m citizen.admin.modes --commons" in script
    # The baseline is the broker's on a server (issue 28): setup makes it elsewhere.
    for sub, mode in layout.DIRS:
        if sub == layout.BASELINE:
            continue
        if sub == f"{layout.STREAMS}/rooms":
            assert sub not in made and mode == layout.SHARED_FILES_MODE == 0o3775
            continue
        assert sub in made, sub
        assert mode == 0o3775, sub
