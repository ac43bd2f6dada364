"""One booted server for the package: its modules run in name order and build on each
other (pytest runs a package's modules in that order)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.installed_server import Server, install
from tests.nspawn import Container


@pytest.fixture(scope="package")
def server() -> Iterator[Server]:
    box = Container(paths.project_dir())
    box.boot()
    try:
        yield install(box)
    finally:
        box.shutdown()
