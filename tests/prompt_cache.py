"""Anthropic prompt caching as the API documents it, for the Messages API test server.

- The prompt is one sequence of blocks in the API's order: tools, then system, then the
  messages' content blocks. A `cache_control` on a block is a breakpoint: the prefix up
  to and including it is cached (at most 4 breakpoints; every 1-hour one before any
  5-minute one, else the API answers 400).
- A request reads the longest prefix that an earlier request cached, byte-identical, up
  to one of its breakpoints (the API looks back up to 20 blocks before each breakpoint
  for an earlier entry); a changed block anywhere before a breakpoint misses it. Caches
  are per model; a message-level entry also depends on `tool_choice`.
- What lies between that hit and the last breakpoint is written, if the prefix up to a
  breakpoint reaches the model's minimum; each segment at its breakpoint's lifetime (a
  5-minute write costs 1.25x the input price, a 1-hour one 2x, a read 0.1x: the prices
  are the meter's, these are the counts).
- An entry lives its TTL (5 minutes or 1 hour) from its last write or read.

Time is the world clock (`shared.clock`), so `bench/month.py`'s simulated month ages
the cache as the citizens' schedules see it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

LOOKBACK = 20  # blocks the API checks before each breakpoint for an earlier entry
MAX_BREAKPOINTS = 4
TTL_S = {"5m": 300.0, "1h": 3600.0}
# The least prefix the API caches, by model (shorter prefixes are silently not cached).
MIN_TOKENS = {"haiku-4-5": 4096, "opus-4-5": 4096, "opus-4-6": 4096, "sonnet-4-6": 2048,
              "haiku-3": 2048}
DEFAULT_MIN_TOKENS = 1024  # Sonnet 4, 4.5, Opus 4, 4.1


class CacheRequestError(ValueError):
    """A request the API refuses for its cache_control marks (HTTP 400)."""


@dataclass(frozen=True)
class Counted:
    """A request's input tokens, as the API's usage splits them."""

    input_tokens: int
    read: int
    write_5m: int
    write_1h: int
    # Tokens not read from the cache, by (why, which block): for bench/cache_report.py.
    missed: Counter[tuple[str, str]] = field(default_factory=Counter, compare=False)

    @property
    def write(self) -> int:
        return self.write_5m + self.write_1h


def min_tokens(model: str) -> int:
    return next((n for key, n in MIN_TOKENS.items() if key in model), DEFAULT_MIN_TOKENS)


# Why a block was not read (PromptCache.count's `missed`).
AFTER_LAST = "after the last breakpoint"  # never cacheable as sent
BELOW_MIN = "below the minimum length"
EXPIRED = "lifetime expired"
LOOKBACK_MISS = "beyond the lookback"
CHANGED = "prefix new or changed"
_HEADING = re.compile(r"^## (\w+)")


def label(section: str, text: str, first: bool) -> str:
    """What a block is, for the report: tools, the system prompt, a context (by its
    heading), the instruction (the first message) or the transcript."""
    if section == "tools":
        return "tools"
    if section == "messages":
        return "instruction" if first else "transcript"
    body = json.loads(text)[-1]
    found = _HEADING.match(str(body.get("text", "")) if isinstance(body, dict) else "")
    return found.group(1) if found else "system prompt"


def blocks(body: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(section, the block's JSON without its mark, its cache_control) in the API's
    order: a mark is not content, so a block marked in one request and not in the next
    is the same block."""
    out: list[tuple[str, str, Any]] = []

    def add(section: str, block: Any, *head: Any) -> None:
        mark = block.get("cache_control") if isinstance(block, dict) else None
        bare = {k: v for k, v in block.items() if k != "cache_control"} \
            if isinstance(block, dict) else block
        out.append((section, json.dumps([*head, bare], sort_keys=True), mark))

    for tool in body.get("tools") or []:
        add("tools", tool)
    system = body.get("system") or []
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        add("system", block)
    for message in body.get("messages") or []:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in parts or []:
            add("messages", block, message.get("role"))
    return out


class PromptCache:
    """One organisation's prompt cache on one test server."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[float, float]] = {}  # key -> (last used, ttl seconds)

    def count(self, body: dict[str, Any], whole: int, now: float,
              tokens: Any) -> Counted:
        """Look the request up, write what it marks, and split its `whole` input tokens;
        `tokens(text)` counts a block.

        :raises CacheRequestError: more than 4 breakpoints, or a 1-hour one after a
            5-minute one.
        """
        seq = blocks(body)
        marks = [i for i, (_, _, cc) in enumerate(seq) if cc is not None]
        if len(marks) > MAX_BREAKPOINTS:
            raise CacheRequestError(f"A maximum of {MAX_BREAKPOINTS} blocks with "
                                    f"cache_control may be provided. Found {len(marks)}.")
        ttls = [str((seq[i][2] or {}).get("ttl", "5m")) for i in marks]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m"):]:
            raise CacheRequestError("a ttl='1h' cache_control block must not come after a "
                                    "ttl='5m' cache_control block")
        keys, sizes, digest = [], [], hashlib.sha256(str(body.get("model")).encode())
        choice = json.dumps(body.get("tool_choice"), sort_keys=True)
        for section, text, _ in seq:
            digest.update(text.encode())
            key = digest.copy()
            if section == "messages":  # tool_choice changes invalidate message entries
                key.update(choice.encode())
            keys.append(key.hexdigest())
            sizes.append(tokens(text))
        cumulative = [sum(sizes[:i + 1]) for i in range(len(sizes))]
        hit = -1
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                used = self.entries.get(keys[i])
                if used is not None and now - used[0] < used[1]:
                    hit = max(hit, i)
                    break
        read = cumulative[hit] if hit >= 0 else 0
        least = min_tokens(str(body.get("model")))
        missed = self._why(seq, keys, sizes, cumulative=cumulative, marks=marks, hit=hit,
                           now=now, least=least)
        if hit >= 0:
            self.entries[keys[hit]] = (now, self.entries[keys[hit]][1])
        written = {"5m": 0, "1h": 0}
        done = hit
        for mark, ttl in zip(marks, ttls, strict=True):
            if mark <= hit or cumulative[mark] < least:
                continue
            written[ttl] += cumulative[mark] - (cumulative[done] if done >= 0 else 0)
            self.entries[keys[mark]] = (now, TTL_S[ttl])
            done = mark
        rest = max(1, whole - read - written["5m"] - written["1h"])
        return Counted(rest, read, written["5m"], written["1h"], missed)

    def _why(self, seq: list[tuple[str, str, Any]], keys: list[str], sizes: list[int], *,
             cumulative: list[int], marks: list[int], hit: int, now: float,
             least: int) -> Counter[tuple[str, str]]:
        """The tokens after the hit, by why they were not read and which block they are
        (before this request's writes: an entry never expires, it stops being live)."""
        out: Counter[tuple[str, str]] = Counter()
        first_message = next((i for i, b in enumerate(seq) if b[0] == "messages"), -1)
        for i in range(hit + 1, len(seq)):
            mark = next((m for m in marks if m >= i), None)
            if mark is None:
                why = AFTER_LAST
            elif cumulative[mark] < least:
                why = BELOW_MIN
            else:
                seen = [self.entries.get(keys[j]) for j in range(hit + 1, mark + 1)]
                if any(s is not None and now - s[0] >= s[1] for s in seen):
                    why = EXPIRED
                elif any(s is not None for s in seen):
                    why = LOOKBACK_MISS
                else:
                    why = CHANGED
            out[(why, label(seq[i][0], seq[i][1], i == first_message))] += sizes[i]
        return out
