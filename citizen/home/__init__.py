"""A citizen's home: one module a store under `~` - its contexts, memory, task queue and
a task's working state, the wake counters (`state`), its spend ledger, its wake logs,
their retention, the quiescent point, and the rollback of its code.

Every file a wake reads or writes in a home goes through one of these modules. May
import: config, errors and `shared` (atomic writes, the one lock); never a wake, a tool,
the model or the commons' protocols.
"""
