"""Who watches which ThoughtStream room from the dashboard (seed §8.5).

A room's page, while the browser shows it, holds one event stream open
(`static/presence.js` closes it when the page is hidden and opens it again when it is
shown); each open stream is a watcher. The first watcher of a room marks a person
present (the room warms, its bids see `user_present`), the last one leaving marks them
absent (it cools). A closed tab, a lost network or a killed browser all end the stream,
so a room is never left "watched" by a page nobody has open.

Marking is slow on a server (one request to root's helper) and a page can be hidden
and shown again quickly, so each room's marks are serialised, and each mark writes the
state the watchers say now - the last word always wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import anyio.to_thread

from citizen.errors import CitizenError
from shared.errors import SharedError

log = logging.getLogger(__name__)


class Watchers:
    """Open room pages per room, and what was last recorded for each room."""

    def __init__(self, mark: Callable[[str, bool], object]) -> None:
        self._mark = mark  # (room, present) -> anything; blocking, run in a thread
        self._open: dict[str, int] = {}
        self._marked: dict[str, bool] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def watching(self, room: str) -> int:
        return self._open.get(room, 0)

    async def join(self, room: str) -> None:
        self._open[room] = self._open.get(room, 0) + 1
        await self._sync(room)

    async def leave(self, room: str) -> None:
        self._open[room] = max(0, self._open.get(room, 0) - 1)
        await self._sync(room)

    async def _sync(self, room: str) -> None:
        async with self._locks.setdefault(room, asyncio.Lock()):
            want = self._open.get(room, 0) > 0
            if self._marked.get(room) == want:
                return
            try:
                await anyio.to_thread.run_sync(self._mark, room, want)
            except (CitizenError, SharedError, OSError) as exc:
                # The page still works; the room just does not learn of this person.
                log.warning("could not mark %s %s: %s", room,
                            "watched" if want else "left", exc)
                return
            self._marked[room] = want
