"""What a server with no route out installs from (tests/lab.py): the project's Python
dependencies as a wheelhouse, and the Debian packages setup_server.sh would fetch beyond
the cached root filesystem - both made once on this host, which reaches the registries,
and cached beside the root filesystem (tests/nspawn.py).

An operator behind a closed network does the same: `pip wheel` where the index is
reachable, then `PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR setup_server.sh` (pip reads both).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from citizen.config import paths
from tests.nspawn import ROOTFS

CACHE = ROOTFS.parent
# setup_server.sh's pip, from the wheelhouse bound read-only at /srv/wheels.
PIP_OFFLINE = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/srv/wheels"}
# What setup_server.sh would apt-get that the cached root filesystem lacks; what it needs
# in turn (libssl3, libgssapi-krb5-2, libldap-2.5-0) is in it. Installed with dpkg -i
# from /srv/debs before setup, which then finds it there.
DEBS = ("libpq5",)


def _dependencies() -> list[str]:
    with (paths.project_dir() / "pyproject.toml").open("rb") as f:
        deps: list[str] = tomllib.load(f)["project"]["dependencies"]
    return deps


def _build(target: Path, make: list[str], fix: str) -> Path:
    """`target`, made by running `make` in a fresh partial directory once."""
    if target.is_dir():
        return target
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    done = subprocess.run(make, cwd=partial, capture_output=True, text=True, timeout=900,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(make[:4])} failed: {done.stderr[-2000:]} - {fix}")
    partial.rename(target)
    return target


def wheelhouse() -> Path:
    """A wheel of every dependency in pyproject.toml (≈15 s once, ≈12 MB; again when they
    change: the directory is named by their digest)."""
    deps = _dependencies()
    digest = hashlib.sha256("\n".join(deps).encode()).hexdigest()[:16]
    return _build(CACHE / f"wheels-{digest}",
                  [sys.executable, "-m", "pip", "wheel", "--quiet",
                   "--disable-pip-version-check", "-w", ".", *deps],
                  "this host's pip must reach its index (pip config list)")


def debs() -> Path:
    """The Debian packages of DEBS, downloaded once."""
    return _build(CACHE / f"debs-{'-'.join(DEBS)}", ["apt-get", "download", *DEBS],
                  "run apt-get update, then again")
