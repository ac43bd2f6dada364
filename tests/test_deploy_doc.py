"""DEPLOY.md holds as written (issue 31): what it says setup installs, where the embedded
model goes and what removing a citizen removes are held to the scripts that do it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from citizen.admin import network
from citizen.config import paths
from shared.layout import Layout

SCRIPTS = paths.project_dir() / "scripts"
DEPLOY = (paths.project_dir() / "DEPLOY.md").read_text()


def section(number: int) -> str:
    found = re.search(rf"^## {number}\. .*?(?=^## )", DEPLOY, re.S | re.M)
    assert found is not None, number
    return found.group(0)


def test_section_1_lists_exactly_the_packages_setup_installs() -> None:
    script = (SCRIPTS / "setup_server.sh").read_text()
    always = re.search(r"^packages=\(([^)]*)\)", script, re.M)
    local = re.search(r'\|\| packages\+=\(([^)]*)\)', script)
    assert always is not None and local is not None
    listed = re.search(r"installs when\s+missing.*?\n\n\s+(.+?)\n\n(.*?)\.", section(1), re.S)
    assert listed is not None, "§1 lists the packages setup installs, indented"
    assert listed.group(1).split() == always.group(1).split()
    assert f"`{local.group(1)}`" in listed.group(2).replace("\n", " ")  # --local-model's


def test_section_2_puts_the_model_where_the_citizens_look_for_it() -> None:
    script = (SCRIPTS / "setup_server.sh").read_text()
    assert "prefix=/opt/experience\n" in script and Path("/opt/experience") == paths.SERVER_PREFIX
    assert 'EXPERIENCE_MODEL_DIR="$prefix/models"' in script  # setup assembles it there
    assert "scripts/setup_server.sh --local-model" in section(2)
    assert "`/opt/experience/models`" in section(2)
    # ... which is where a citizen's process looks on a server (when the directory exists)
    assert str(paths.SERVER_PREFIX / "models") == "/opt/experience/models"


def test_section_7_removes_every_file_onboarding_made(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    remover = SCRIPTS / "remove_citizen.sh"
    assert os.access(remover, os.X_OK)
    assert "scripts/remove_citizen.sh opus" in section(7)
    script = remover.read_text()
    commons = Layout(tmp_path)
    made = [commons.heartbeat("nova"), commons.doorbell("nova"), commons.quiesce / "nova.lock"]
    for path in made:
        assert f'"$shared/{path.relative_to(tmp_path)}"'.replace("nova", "$name") in script, path
    for rule in ("$name.env", "$name.json"):
        assert f"/etc/experience/{rule}" in script, rule
    monkeypatch.setenv(network.UNIT_DIR_ENV, "/etc/systemd/system")
    for unit in network.UNITS:  # its daemon's unit and its wake unit, with their drop-ins
        assert network.drop_in("nova", unit).parent == Path(
            f"/etc/systemd/system/{unit}@nova.service.d")
        assert f'"{unit}@$name.service"' in script, unit
    assert 'units=/etc/systemd/system' in script and 'rm -rf "$units/$unit.d"' in script
