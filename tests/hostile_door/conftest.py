"""One booted server for the trusted door's attacks (issue 42): each module of this
package is one group of findings, each test one attack a citizen's Unix user makes on a
real server, against root's CLI, root's approval helper, the web user, the scheduler or
the broker. One boot for the package (pytest runs its modules in name order); each test
leaves the server as a later test expects it (the citizens running, no planted file
left behind).

Root and systemd-nspawn needed; skipped with the reason elsewhere.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.nspawn import PATH, Container, set_up_server, unavailable

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")


@pytest.fixture(scope="package")
def box() -> Iterator[Container]:
    if unavailable():
        pytest.skip(unavailable())
    with set_up_server(paths.project_dir(), "experience-door") as (box, _):
        yield box


def as_user(box: Container, user: str, script: str, check: bool = True) -> str:
    """A shell script as `user`, outside any sandbox: what its daemon, rewritten, could
    run (its whole Unix user is untrusted)."""
    return box.run("runuser", "-u", user, "--", "sh", "-c", script, check=check).stdout


def as_root(box: Container, script: str, check: bool = True) -> str:
    """A shell script as root - the operator's own commands (`citizen ...` via sudo)."""
    return box.run("sh", "-c", script, check=check).stdout


def spawn(box: Container, *cmd: str) -> subprocess.Popen[str]:
    """`cmd` as root inside the box, in the background: the operator's command a test
    pauses at a fault point while the attacker moves."""
    return subprocess.Popen(
        ["nsenter", "-t", str(box.systemd_pid), "-m", "-u", "-i", "-n", "-p", "-C", "-r",
         "-w", "env", "-i", f"PATH={PATH}", *cmd],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
