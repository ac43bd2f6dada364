"""What every proposal cited: the memory behind the gaming check's repetition flag.

The check compares a proposal's value justifications with those of every other
proposal ever made. Rereading every revision on every load made `owed()` quadratic
in the proposals a civilization ever made; here each proposal's keys are kept and
reread only when its thread directory changed (one stat per proposal - on several
servers the broker's stamp of its folder), and an `owed()` call reads the index once
for all the proposals it loads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from shared.atomic import CorruptFile, read_json
from shared.consensus import gaming
from shared.threads import Threads


class Justifications:
    """The justification keys of every proposal in `threads`."""

    def __init__(self, threads: Threads) -> None:
        self.threads = threads
        self._keys: dict[str, tuple[object, frozenset[str]]] = {}  # pid -> (seen, keys)
        self._frozen: dict[str, list[str]] | None = None
        self._whole: tuple[tuple[int, ...], dict[str, list[str]]] | None = None  # remote

    def elsewhere(self, pid: str) -> dict[str, str]:
        """Each key cited by a proposal older than `pid`: the first proposal citing it.
        Only older ones: the copy is the later text, and a proposal's flags - which can
        hold it back - must not change because another proposal copied it afterwards."""
        seen: dict[str, str] = {}
        index = self._frozen if self._frozen is not None else self.index()
        for key, pids in index.items():
            other = next((p for p in pids if p < pid), None)
            if other is not None:
                seen[key] = other
        return seen

    def index(self) -> dict[str, list[str]]:
        """key -> the proposals citing it, oldest first."""
        whole: tuple[int, ...] = ()
        if self.threads.remote is not None:  # one stamp while no thread changed, not one each
            whole = self.threads.remote.stamp(self.threads.key(self.threads.root))
            if self._whole is not None and self._whole[0] == whole:
                return {k: list(v) for k, v in self._whole[1].items()}
        out: dict[str, list[str]] = {}
        for pid in self.threads.ids():
            if not self.threads.exists(pid):
                continue  # a directory without its request is no proposal (one planted
                # to sort first would flag every proposal after it as a copy)
            try:  # a new revision changes it
                mtime: object = self.threads.signature(pid) if self.threads.remote \
                    is not None else self.threads.dir(pid).stat().st_mtime_ns
            except FileNotFoundError:
                continue
            cached = self._keys.get(pid)
            if cached is None or cached[0] != mtime:
                cached = self._keys[pid] = (mtime, self._read(pid))
            for key in cached[1]:
                out.setdefault(key, []).append(pid)
        if whole:
            self._whole = (whole, {k: list(v) for k, v in out.items()})
        return out

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Within: every `elsewhere` uses one index, read on entry."""
        self._frozen = self.index()
        try:
            yield
        finally:
            self._frozen = None

    def _read(self, pid: str) -> frozenset[str]:
        keys: set[str] = set()
        for name in self.threads.names(pid, "proposal-*.json"):
            if self.threads.remote is not None:  # the executor's row: a peer's there is not it
                roles = self.threads.header(pid).get("roles")  # its opener's: any shape
                executor = roles.get("executor") if isinstance(roles, dict) else None
                rec = self.threads.read(pid, name, str(executor)) if executor else None
                keys.update(gaming.justification_keys(rec) if rec is not None else ())
                continue
            try:
                keys.update(gaming.justification_keys(read_json(self.threads.dir(pid) / name)))
            except CorruptFile:
                continue
        return frozenset(keys)
