"""Frozen values, mutable weights (the Thought World value framework): the files.

`templates/values.yaml` holds the base values (frozen) and, per role profile, the
starting weights and their bounds (`load_framework`). A citizen's current weights are
its profile's plus every adjustment in `shared/values/weight_history.jsonl` that the
pure replay (`shared.consensus.weighing`) accepts. On several servers (`remote`) each
adjustment is a record of its own under `values/weight_history/`
(`shared.consensus.journal`), and the lock a once-a-day job holds across its
check-then-write (`diversity`) is a lease.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from shared import clock
from shared.atomic import append_line, make_dirs, read_jsonl
from shared.consensus import weighing
from shared.consensus.episodes import Episodes
from shared.consensus.journal import Journal, folder_of
from shared.consensus.weighing import Framework, Vouch
from shared.layout import Layout
from shared.locks import locked
from shared.remote import Remote, key

log = logging.getLogger(__name__)

HISTORY_MODE = 0o664  # appended by every integrator (group `citizens`), read by all
# The history's newest 4 MiB: ~12,000 adjustments of ~300 bytes (6 an episode at most).
# Every citizen can append to (or truncate) the file, so a reader never takes more: a
# sparse terabyte or a flood planted there would otherwise fill root's memory at every
# decision (the replay runs in each `load`).
HISTORY_TAIL = 4 * 2**20


def load_framework(path: Path) -> Framework:
    """The framework `values.yaml` at `path` describes."""
    import yaml  # noqa: PLC0415 - ≈30 ms that `citizen --help` and every idle wake need not pay

    return Framework.parse(yaml.safe_load(path.read_text(encoding="utf-8")))


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.lstat()  # the file itself: a link planted there is no history
    except FileNotFoundError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


class Weights:
    """Every citizen's weights, derived from its profile and the history.

    The history is one file every integrator appends to (group `citizens`), so a line
    proves nothing by being there: it moves a weight only if `vouch` confirms it (the
    commons checks it against its episode's record: that proposal's integrator approved
    exactly this adjustment) or it is a diversity step the replay itself would allow
    (see `weighing.replay`). Malformed lines are skipped. The replay is cached until the
    history or the episode log changes.
    """

    def __init__(self, shared_dir: Path, framework: Framework,
                 profiles: Mapping[str, str], vouch: Vouch | None = None,
                 remote: Remote | None = None) -> None:
        self.history_path = Layout(shared_dir).weight_history
        self.episodes_path = Layout(shared_dir).episodes  # a vouch's evidence
        self.journal = None if remote is None else Journal(
            remote, folder_of(key(shared_dir, self.history_path)))
        self.evidence = Episodes(shared_dir, remote)  # only its stamp: when vouches change
        self._pinned: tuple[int, ...] | None = None  # `steady`'s key
        self.framework = framework
        self.profiles = dict(profiles)  # citizen -> profile name (executor, verifier, …)
        self.vouch = vouch
        self._key: tuple[int, ...] = ()
        self._replayed: dict[str, dict[str, float]] = {}
        # What was wrong with the history at the last read ("" when nothing): the
        # replay went on without it, and the operator's pages name it.
        self.problem = ""

    def profile(self, citizen: str) -> str:
        return self.profiles.get(citizen, "integrator")

    def history(self) -> list[dict[str, Any]]:
        """The well-formed lines among the history's newest HISTORY_TAIL bytes (anything
        else is skipped). A history that cannot be read - a link, a FIFO, unreadable - is
        no history: the replay starts from the profiles, `problem` says why, and nobody's
        step or decision waits for it."""
        self.problem = ""
        if self.journal is not None:
            return [line for line in self.journal.lines() if weighing.well_formed(line)]
        try:
            size = self.history_path.lstat().st_size
            lines = read_jsonl(self.history_path, tail_bytes=HISTORY_TAIL)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.problem = f"{self.history_path} is not read ({exc}) - move it aside"
            log.warning("%s", self.problem)
            return []
        if size > HISTORY_TAIL:
            self.problem = (f"{self.history_path} holds {size} bytes; only its newest "
                            f"{HISTORY_TAIL} count - move it aside if a citizen filled it")
            log.warning("%s", self.problem)
        return [line for line in lines if weighing.well_formed(line)]

    def key(self) -> tuple[int, ...]:
        """Changes whenever the replay may: the history or the episode log changed."""
        if self._pinned is not None:
            return self._pinned
        if self.journal is not None:
            return (*self.journal.stamp(), *self.evidence.stamp())
        return (*_stat(self.history_path), *_stat(self.episodes_path))

    def stamp(self) -> tuple[int, ...]:
        """Changes whenever the history does (a line added)."""
        if self.journal is not None:
            return self.journal.stamp()
        return _stat(self.history_path)[:1]

    def lock(self, seconds: float) -> AbstractContextManager[Any]:
        """One check-then-write of the history at a time (`diversity`), waited for at most
        `seconds`: the history file's flock on one server; on several a lease, which the
        broker's clock frees if its holder dies (as the kernel drops a dead one's flock)."""
        if self.journal is not None:
            return self.journal.remote.lease(f"{self.journal.folder}.lock", seconds)
        return locked(self.history_path, timeout=seconds)

    @contextmanager
    def steady(self) -> Iterator[None]:
        """Within: the key is asked once (a read that writes nothing, such as a proposal's
        load: on several servers each ask is two calls to the broker)."""
        if self._pinned is not None:
            yield
            return
        self._pinned = self.key()
        try:
            yield
        finally:
            self._pinned = None

    def current(self, citizen: str) -> dict[str, float]:
        key = self.key()
        if key != self._key:
            self._replayed = weighing.replay(self.framework, self.profiles, self.history(),
                                             self.vouch)
            self._key = key
        return dict(self._replayed.get(citizen)
                    or self.framework.start(self.profile(citizen)))

    def floors(self, target: float) -> dict[str, float]:
        """Each value's σ floor (see `weighing.floors`)."""
        return weighing.floors(self.framework, self.profiles.values(), target)

    def adjust(self, citizen: str, value: str, delta: float, *, episodes: list[str],
               approved_by: str, reason: str) -> dict[str, Any]:
        """Record one adjustment approved by the integrator `approved_by`.

        :raises Invalid: see `weighing.adjusted` (nothing is written).
        """
        current = self.current(citizen)
        new = weighing.adjusted(self.framework, citizen, value, delta,
                                profile=self.profile(citizen), current=current,
                                history=self.history(), episodes=episodes,
                                approved_by=approved_by)
        line = {"ts": clock.now(), "citizen": citizen, "value": value, "old": current[value],
                "new": new, "delta": delta, "episodes": episodes, "approved_by": approved_by,
                "reason": reason[:500]}
        if self.journal is not None:  # a record of its own: no lock, as appending a line
            return self.journal.add(line)
        make_dirs(self.history_path.parent)
        append_line(self.history_path, line, mode=HISTORY_MODE)
        return line

    def diversity(self, citizens: Iterable[str]) -> dict[str, float]:
        """Standard deviation of each value's weight across citizens (seed: σ > 0.15)."""
        return weighing.diversity(self.framework, [self.current(c) for c in citizens])
