"""Every module imports on its own, first, in a fresh interpreter: an import cycle that
only bites in one order (as `citizen wake` imports) fails here, not on a server."""

from __future__ import annotations

import subprocess
import sys

import grimp

from citizen.config import paths


def test_every_module_imports_first() -> None:
    root = paths.project_dir()
    modules = sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for pkg in ("citizen", "shared") for p in (root / pkg).rglob("*.py"))
    script = ("import subprocess, sys\n"
              "bad = []\n"
              "for m in sys.argv[1:]:\n"
              "    r = subprocess.run([sys.executable, '-c', f'import {m}'],\n"
              "                       capture_output=True, text=True)\n"
              "    if r.returncode:\n"
              "        bad.append(m + ': ' + r.stderr.strip().splitlines()[-1])\n"
              "print('\\n'.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", script, *modules], capture_output=True,
                         text=True, check=True, cwd=root).stdout.strip()
    assert out == "", out


def test_shared_has_no_import_cycle() -> None:
    """No module of `shared` reaches itself through its imports (type-checking imports
    included): a cycle that imports today only by the order of its lines breaks later."""
    graph = grimp.build_graph("shared")
    cycles = sorted(f"{m} <-> {i}" for m in graph.modules
                    for i in graph.find_modules_directly_imported_by(m)
                    if graph.chain_exists(importer=i, imported=m))
    assert cycles == []
