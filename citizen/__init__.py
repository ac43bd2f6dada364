"""Experience: the daemon and tools a citizen runs, the broker, and the operator's CLI.

The packages are layers (docs/architecture.md): cli, broker, daemon, admin, wake, tools,
mail, llm, home, the commons door (`civilization`), access, config, errors - each may
import only those after it in this list (`lint-imports` checks it)."""

__version__ = "0.1.0"
