"""No import cycle in citizen, between any two of its modules.

The import-linter contract `acyclic_siblings` (pyproject.toml) catches cycles between
the siblings of a package; this catches the ones it cannot see: a package's
`__init__` and a module inside it (a submodule importing the package that re-exports
it). Function-level and TYPE_CHECKING imports count: each hides a cycle as well.
"""

from __future__ import annotations

import grimp


def test_no_module_of_citizen_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("citizen", "shared")
    cycles = sorted({
        tuple(sorted((module, imported)))
        for module in graph.modules if module.startswith("citizen")
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("citizen")
        and graph.chain_exists(importer=imported, imported=module)})
    assert cycles == [], "\n".join(f"{a} <-> {b}" for a, b in cycles)
