"""Where everything in the commons is: the one module that knows its paths.

`Layout(root)` names every directory and shared file under the commons root
(`CIV_ROOT/shared`); every protocol, the citizen side and `citizen init` take their
paths from it, so a directory is renamed here or nowhere. What lies inside a
protocol's own directory (a thread's records, a module's reviews) is that protocol's
business; where its directory is, is this module's.

`DIRS` are the directories made when the commons is created (`citizen init`;
scripts/setup_server.sh makes the same list), each with its mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# 3775: group `citizens` adds records, setgid keeps new files in that group, sticky:
# nobody removes, renames or replaces what another made.
RECORDS_MODE = 0o3775
# 2775: rewritten in place by whoever acts next - adoption merges rewrite files other
# citizens wrote in the baseline.
REWRITTEN_MODE = 0o2775
# 3775 on the folders of files every citizen rewrites (a proposal's views, the rooms'
# documents): sticky, so nobody moves, deletes or replaces what another (root) wrote;
# the next writer rewrites another's file in place (shared.records.overwrite_in).
SHARED_FILES_MODE = 0o3775
ROOT_MODE = 0o3775  # the commons itself: as every record directory

BASELINE = "baseline"
LIBRARY = "library"
TOOLS = "tools"
PROPOSALS = "proposals"
VIEW_STATES = ("pending", "approved", "rejected")  # proposals/<state>/<id>.json
DEBATES = "debates"
STREAMS = "streams"
MONITOR = "monitor"
DOORBELL = "doorbell"
CHANGES = "changes"
MERGED = "merged"  # the broker's records of merges (its user alone writes there)
DRAWS = "draws"  # the broker's draws of each change's reviewers (its user alone writes)
MEMORY = "memory"
VALUES = "values"
WORLD = "world"
WORKSPACE = "workspace"
DRY = "dry"
GOALS = "goals"

# (directory under the root, mode), in the order they are made.
DIRS: tuple[tuple[str, int], ...] = (
    (BASELINE, REWRITTEN_MODE),
    (f"{LIBRARY}/modules", RECORDS_MODE), (f"{LIBRARY}/pending", RECORDS_MODE),
    (f"{TOOLS}/impl", RECORDS_MODE), (f"{TOOLS}/registry", RECORDS_MODE),
    (f"{TOOLS}/tests", RECORDS_MODE),
    (f"{PROPOSALS}/records", RECORDS_MODE),
    *((f"{PROPOSALS}/{state}", SHARED_FILES_MODE) for state in VIEW_STATES),
    (DEBATES, RECORDS_MODE), (STREAMS, RECORDS_MODE), (f"{STREAMS}/rooms", SHARED_FILES_MODE),
    (f"{MONITOR}/heartbeats", RECORDS_MODE), (DOORBELL, RECORDS_MODE),
    (CHANGES, RECORDS_MODE), (MEMORY, RECORDS_MODE), (VALUES, RECORDS_MODE),
)


@dataclass(frozen=True)
class Layout:
    """The paths of one commons."""

    root: Path

    # ------------------------------------------------------------ code

    @property
    def baseline(self) -> Path:
        """The baseline repository (the broker's user writes it)."""
        return self.root / BASELINE

    @property
    def changes(self) -> Path:
        """Announced code changes and their reports and adoptions (shared.evolution)."""
        return self.root / CHANGES

    @property
    def merged(self) -> Path:
        """The broker's records of the changes it merged (shared.baseline)."""
        return self.root / MERGED

    @property
    def draws(self) -> Path:
        """The broker's draws of each change's reviewers (shared.draws)."""
        return self.root / DRAWS

    # ------------------------------------------------------------ protocols

    @property
    def library(self) -> Path:
        return self.root / LIBRARY

    @property
    def tools(self) -> Path:
        """Dynamic tools: impl/, tests/, registry/ (shared.dyntools)."""
        return self.root / TOOLS

    @property
    def proposals(self) -> Path:
        """Consensus: records/<id>/ (the threads) and the views per state."""
        return self.root / PROPOSALS

    @property
    def proposal_records(self) -> Path:
        return self.proposals / "records"

    @property
    def debates(self) -> Path:
        return self.root / DEBATES

    @property
    def streams(self) -> Path:
        return self.root / STREAMS

    @property
    def dry(self) -> Path:
        return self.root / DRY

    @property
    def goals(self) -> Path:
        return self.root / GOALS

    # ------------------------------------------------------------ shared state

    @property
    def memory(self) -> Path:
        """Episodes and the consensus history (shared.consensus.episodes)."""
        return self.root / MEMORY

    @property
    def episodes(self) -> Path:
        return self.memory / "episodes.jsonl"

    @property
    def patterns(self) -> Path:
        """Learned patterns (shared.consensus.patterns)."""
        return self.memory / "patterns.jsonl"

    @property
    def weight_history(self) -> Path:
        return self.root / VALUES / "weight_history.jsonl"

    @property
    def world(self) -> Path:
        """The world repository that executed proposals act on."""
        return self.root / WORLD

    @property
    def workspace(self) -> Path:
        """Thought World tasks' scratch space: <task id>/ (shared.consensus.workspace)."""
        return self.root / WORKSPACE

    @property
    def world_lock(self) -> Path:
        return self.root / ".world.lock"

    # ------------------------------------------------------------ the citizens

    @property
    def monitor(self) -> Path:
        return self.root / MONITOR

    @property
    def heartbeats(self) -> Path:
        return self.monitor / "heartbeats"

    def heartbeat(self, citizen: str) -> Path:
        return self.heartbeats / f"{citizen}.json"

    @property
    def findings(self) -> Path:
        """Peer reports: findings/<peer>/ (shared.monitor)."""
        return self.monitor / "findings"

    @property
    def quiesce(self) -> Path:
        """The quiesce locks, one per citizen (citizen.home.quiesce)."""
        return self.monitor / "quiesce"

    def doorbell(self, citizen: str) -> Path:
        return self.root / DOORBELL / citizen
