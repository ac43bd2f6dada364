"""A working wake's turn: the daemon waits for the broker's wake permit before it starts
the wake process, and holds it while the process runs (`citizen.broker.permits`: at
most `max_working_wakes` citizens work at once in the whole civilization).

- Waiting says so: the daemon's state is `waiting`, and its heartbeat and process title
  say how many are ahead (`citizen status`, the dashboard).
- A SIGTERM ends the wait at once (`Cancel`): the wake is not started, the daemon stops.
- No broker, or a refusal: fail closed - no wake process without a permit. The daemon
  says why in its journal and heartbeat and asks again (RETRY_S, doubling to
  RETRY_MAX_S). Why not run the wake anyway: on a server its model calls would be
  refused, and wakes started while the broker is away would be past the bound when it
  is back.
- A permit lost while the wake runs (its lease ran out, or the broker restarted) stops
  the wake as its deadline would: the broker grants that permit afresh, and a wake that
  ran on would be one more than the bound.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from citizen.access.permit import Cancel, Cancelled, Permit
from citizen.errors import ProviderUnavailable

log = logging.getLogger(__name__)

RETRY_S, RETRY_MAX_S = 5.0, 60.0


@contextmanager
def taken(name: str, number: int, cancel: Cancel,
          say: Callable[[str], None]) -> Iterator[Permit | None]:
    """Citizen `name`'s permit for wake `number`, held for the block; None when `cancel`
    was set first. `say(text)` whenever the wait changes ("for a wake permit (3 ahead)")."""
    permit = _wait(name, cancel, say)
    if permit is None:
        log.warning("wake %d: not started - stopping while it waited for its wake permit",
                    number)
        yield None
        return
    with permit:
        yield permit


def _wait(name: str, cancel: Cancel, say: Callable[[str], None]) -> Permit | None:
    delay = RETRY_S
    while True:
        try:
            return Permit(name).wait(
                cancel, said=lambda ahead: say(f"for a wake permit ({ahead} ahead)"))
        except Cancelled:
            return None
        except ProviderUnavailable as exc:
            log.error("citizen %s: no wake without a wake permit, and none was had: %s - "
                      "asking again in %.0f s", name, exc, delay)
            say(f"for a wake permit: {exc}")
            if cancel.wait(delay):
                return None
            delay = min(delay * 2, RETRY_MAX_S)


def lost(number: int, why: str, stop: Callable[[], None]) -> None:
    """The permit of wake `number` ended while it ran: stop the wake."""
    log.error("wake %d: its wake permit ended (%s); the wake is stopped", number, why)
    stop()
