"""The broker's draw of a change's reviewers (issue 43): `POST /v1/experience/changes/draw`.

Asked right after a change is announced (by its author's `code_announce`; anyone may ask,
the first draw stands). The broker reads the announcement - whose author the file's owner
proves - draws a random seed, weighs each peer's standing and files the order
(`shared.evolution.Evolution.draw`, `shared.draws`):

- **k** is the author's `evolution.reviewers`, as the operator set it: the broker reads
  the templates and the operator's file, never a citizen's own config on a server;
- **load**: how often each peer was among the first k of the last day's draws (the
  broker's own records), so reviews spread over the civilization;
- **relevance**: a peer whose focus or strengths (templates and the operator's file; on a
  server nothing a citizen writes) name a word of the files changed counts one review less.

The seed comes from the broker after the commit is fixed: an author cannot grind its
commit hash until the order picks its friends. On several servers the announcement, the
last day's draws and the draw filed are the civilization's rows (`repos.evolution_of`):
the first draw written there stands, so two servers' brokers asked at once answer with
one. Cost: one config per peer, cached by its files' stamps (a stat each), and the last
day's draws - not the whole history.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import Counter
from typing import Any

from citizen import config
from citizen.broker.refused import Refused
from citizen.broker.repos import citizens, evolution_of, field, refusal
from citizen.broker.rules import RuleCache
from citizen.broker.server import Broker, route
from citizen.config import paths
from citizen.errors import ConfigError
from shared import change_rules, draws
from shared.errors import SharedError
from shared.evolution import Evolution
from shared.layout import Layout
from shared.remote import Remote

log = logging.getLogger(__name__)
LOCK = threading.Lock()  # one draw at a time: two askers of one change get the same draw
_STANDING: dict[str, tuple[tuple[Any, ...], tuple[str, tuple[str, ...], int]]] = {}


def standing(name: str, server_mode: bool) -> tuple[str, tuple[str, ...], int]:
    """(focus, strengths, evolution.reviewers) of a citizen as the operator governs it,
    cached until one of its rule files changes."""
    stamp = RuleCache.stamp(name)  # the files its rules come from: changed, read again
    hit = _STANDING.get(name)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    cfg = config.load_citizen(name, own=not server_mode)
    value = (cfg.focus, tuple(cfg.strengths), cfg.evolution.reviewers)
    _STANDING[name] = (stamp, value)
    return value


def load(shared_dir: Any, server_mode: bool, remote: Remote | None = None) -> Counter[str]:
    """How often each citizen was among the first k of the last day's draws."""
    out: Counter[str] = Counter()
    for record in draws.recent(shared_dir, change_rules.LOAD_WINDOW_S, server_mode, remote):
        out.update(record["order"][:record["k"]])
    return out


@route("POST", "/v1/experience/changes/draw")
def draw(broker: Broker, citizen: str, body: bytes) -> tuple[int, Any]:
    change_id = field(body, "change_id")
    shared, mode = paths.shared_dir(), broker.server_mode
    evolution = evolution_of(broker, citizen)
    with LOCK:
        try:
            change = evolution.get(change_id)
            existing = draws.read(shared, change_id, mode, evolution.remote)
            if existing is not None:
                return 200, _answer(existing)
            _, _, k = standing(change.citizen, mode)
            relevant = set()
            for peer in set(evolution.citizens) - {change.citizen}:
                try:
                    focus, strengths, _ = standing(peer, mode)
                except ConfigError as exc:  # a broken file: that peer is weighed as unrelated
                    log.warning("draw of %s: %s's rules are unreadable: %s", change_id, peer, exc)
                    continue
                if change_rules.relevant(change.files, focus, strengths):
                    relevant.add(peer)
            record = evolution.draw(change_id, k=k, seed=secrets.token_hex(16),
                                    load=load(shared, mode, evolution.remote),
                                    relevant=relevant)
        except ConfigError as exc:
            raise Refused(500, "api_error", f"the broker cannot read the author's rules: "
                          f"{exc}") from exc
        except (SharedError, OSError) as exc:
            raise refusal(exc) from exc
    log.info("drew reviewers for %s (asked by %s): %s", change_id, citizen,
             ", ".join(record["order"][:record["k"]]))
    return 200, _answer(record)


def _answer(record: dict[str, Any]) -> dict[str, Any]:
    return {"change": record.get("change"), "k": record["k"],
            "first": record["order"][:record["k"]], "drawn": record["drawn"]}



OWED_WINDOW_S = 6 * change_rules.REVIEW_DEADLINE_S  # a review owed is one drawn lately
# The last window's draws, read again only when the folder changes (its mtime: a draw
# added): a permit request costs a stat, not a listing of every draw ever made.
_RECENT: dict[str, Any] = {"stamp": None, "draws": []}


def owes_review(citizen: str) -> bool:
    """Whether `citizen` was drawn to review a change that is still pending and has not
    reported on it - from the broker's own draws and the records (authorship from the
    files' owners), never from what the caller says: its wake permit goes ahead of the
    queue (`citizen.broker.permits`). Cost: a stat, and the changes of the last hours'
    draws that name it."""
    mode, shared = config.server_mode(), paths.shared_dir()
    try:
        stamp = Layout(shared).draws.stat().st_mtime_ns
    except OSError:
        return False  # no draw yet
    if stamp != _RECENT["stamp"]:
        _RECENT["draws"] = draws.recent(shared, OWED_WINDOW_S, mode)
        _RECENT["stamp"] = stamp
    mine = [str(d["change"]) for d in _RECENT["draws"]
            if citizen in d["order"] and isinstance(d.get("change"), str)]
    if not mine:
        return False
    evolution = Evolution(shared, citizens(mode), mode)
    for change_id in mine:
        change = evolution.get(change_id)
        if change.status in ("pending", "verified_good") and citizen in change.reviewers \
                and citizen not in change.counted:
            return True
    return False
