"""The commons handle: every protocol of `CIV_ROOT/shared`, built once per process.

The citizen side never builds a protocol or a commons path itself: it asks
`citizen.civilization.commons()` for this handle, which knows the directory, the
citizens, whether authorship is enforced (server mode) and the value framework, so
a second backend (DESIGN §10) changes this package and nothing in `citizen/`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import doorbell
from shared.dry import DryTracker
from shared.errors import SharedError
from shared.goals import Goals
from shared.layout import Layout
from shared.remote import Remote

if TYPE_CHECKING:
    from shared.consensus import Consensus
    from shared.consensus.weighing import Framework
    from shared.debates import Debates
    from shared.dyntools import DynTools
    from shared.evolution import Evolution
    from shared.library import Library
    from shared.monitor import Monitor
    from shared.streams import Streams

log = logging.getLogger(__name__)

# A protocol is imported when first used (in its property below, each import's comment
# saying what importing it adds once this module is imported, measured on this tree):
# a process uses one or two protocols, and all of them at start would add ~130 ms to
# every citizen process. The dry tracker and the goals (~10 ms) are imported above.


@dataclass
class Commons:
    """One civilization's commons, as seen by one process (a citizen or the operator)."""

    dir: Path
    citizens: list[str]
    enforce: bool  # server mode: a record counts only when its file is its author's
    framework_path: Path  # the frozen base values (templates/values.yaml)
    profiles: Mapping[str, str] = field(default_factory=dict)  # citizen -> values profile
    approvals: int = 2  # peer approvals a library module or dynamic tool needs
    code_dirs: Mapping[str, Path] = field(default_factory=dict)  # citizen -> its ~/code
    medium_programs: frozenset[str] = frozenset()  # the operator's stakes allow-list
    # The broker's repository steps (its user alone writes the baseline and the world,
    # issue 28): (citizen, change id) -> merge, and the world's execute/revert requests;
    # (citizen, change id) -> the broker's draw of a new change's reviewers (issue 43).
    merge_request: Any = None
    draw_request: Any = None
    world_request: Any = None
    # A civilization of several servers: the records the broker keeps (shared.remote);
    # None: the commons is the files under `dir`. Debates, Thought World and evolution
    # use it; the other protocols are still each server's files (docs/architecture.md §6).
    remote: Remote | None = None

    @cached_property
    def layout(self) -> Layout:
        return Layout(self.dir)

    @cached_property
    def framework(self) -> Framework:
        from shared.consensus.values import load_framework  # noqa: PLC0415 - start-up, 90 ms

        return load_framework(self.framework_path)

    @cached_property
    def consensus(self) -> Consensus:
        from shared.consensus import Consensus  # noqa: PLC0415 - start-up, 90 ms

        return Consensus(self.dir, self.framework, self.profiles, self.citizens, self.enforce,
                         medium_programs=self.medium_programs,
                         world_request=self.world_request, remote=self.remote)

    @cached_property
    def debates(self) -> Debates:
        from shared.debates import Debates  # noqa: PLC0415 - start-up, 20 ms

        return Debates(self.dir, self.citizens, self.enforce, remote=self.remote)

    @cached_property
    def streams(self) -> Streams:
        from shared.streams import Streams  # noqa: PLC0415 - start-up, 23 ms

        return Streams(self.dir, self.citizens, self.enforce)

    @cached_property
    def library(self) -> Library:
        from shared.library import Library  # noqa: PLC0415 - start-up, 15 ms

        return Library(self.dir, self.approvals, self.enforce)

    @cached_property
    def tools(self) -> DynTools:
        from shared.dyntools import DynTools  # noqa: PLC0415 - start-up, 19 ms

        return DynTools(self.dir, self.approvals, self.enforce)

    @cached_property
    def evolution(self) -> Evolution:
        from shared.evolution import Evolution  # noqa: PLC0415 - start-up, 56 ms

        return Evolution(self.dir, self.citizens, self.enforce, code_dirs=self.code_dirs,
                         merge_request=self.merge_request, draw_request=self.draw_request,
                         remote=self.remote)

    @cached_property
    def dry(self) -> DryTracker:
        return DryTracker(self.dir, self.enforce)

    @cached_property
    def goals(self) -> Goals:
        return Goals(self.dir, self.enforce)

    @cached_property
    def monitor(self) -> Monitor:
        from shared.monitor import Monitor  # noqa: PLC0415

        return Monitor(self.layout.findings, self.enforce)

    def doorbell_dir(self, citizen: str) -> Path:
        return self.layout.doorbell(citizen)

    def ring(self, citizen: str, wake_type: str, reason: str, sender: str = "operator",
             owner: tuple[int, int] | None = None) -> bool:
        """Ring a citizen's doorbell for a wake of `wake_type`; False (logged) when it
        cannot be rung - the work then waits for that citizen's scheduled wake."""
        if not citizen or citizen == "operator":
            return False
        if self.remote is not None and not self.doorbell_dir(citizen).is_dir():
            # Several servers, and it lives on another: its broker hears the NOTIFY.
            try:
                self.remote.ring(citizen, wake_type, reason)
            except (OSError, SharedError) as exc:
                log.warning("could not ring %s on its server (%s: %s): %s", citizen,
                            wake_type, reason, exc)
                return False
            return True
        try:
            doorbell.ring(self.doorbell_dir(citizen), wake_type, reason, sender, owner)
        except OSError as exc:
            log.warning("could not ring %s (%s: %s): %s", citizen, wake_type, reason, exc)
            return False
        return True
