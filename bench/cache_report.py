"""Where bench/month.py's prompt tokens missed the cache, and the most that can be read.

Each citizen's calls go to a test server of its own (one prompt cache for all, as one
organisation's), so the n-th request a server counted is the citizen's n-th ledger line:
the ledger says the wake type, the purpose and the model; the cache model
(tests/prompt_cache.py) says, per block, why what was not read was not read. Nothing
here asserts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

HOUR_S = 3600.0  # the longest cache lifetime
# Calls that carry no system prompt (citizen/wake/selection.py, verifier.py): short, under
# every model's minimum, so no cache entry; they do not keep a prefix alive either.
NO_SYSTEM = frozenset(("select_tools", "route", "verify_task", "task_deliverables"))


def _split(counted: Any) -> tuple[int, int]:
    """(prompt tokens, read from cache) of one counted request."""
    return counted.input_tokens + counted.read + counted.write, counted.read


def report_cache(calls: Mapping[str, Sequence[tuple[dict[str, Any], Any]]]) -> None:
    """`calls`: per citizen, (ledger line, counted request) in call order."""
    by_wake: dict[str, list[int]] = {}
    by_position: dict[str, list[int]] = {}
    missed: Counter[tuple[str, str]] = Counter()
    total = read = 0
    for lines in calls.values():
        last_on: dict[str, datetime] = {}  # model -> the citizen's previous call on it
        first_of: set[tuple[Any, str]] = set()
        for line, counted in lines:
            size, got = _split(counted)
            total, read = total + size, read + got
            at = datetime.fromisoformat(str(line["ts"]).replace("Z", "+00:00"))
            model = str(line.get("model"))
            before = last_on.get(model)
            gap = (at - before).total_seconds() if before is not None else None
            bare = line.get("purpose") in NO_SYSTEM
            if not bare:
                last_on[model] = at
            wake = (line.get("wake"), str(line.get("wake_type")))
            first = wake not in first_of
            where = "no system prompt (selection, route, verdict)" if bare else (
                ("first call of the wake" if first else "later call of the wake") + (
                    ", after > 1 h on its model" if gap is None or gap > HOUR_S
                    else ", within the hour"))
            if not bare:
                first_of.add(wake)
            for key, table in ((wake[1], by_wake), (where, by_position)):
                row = table.setdefault(key, [0, 0, 0])
                row[0], row[1], row[2] = row[0] + 1, row[1] + size, row[2] + got
            missed.update(counted.missed)
    if not total:
        return
    print(f"\nprompt cache over the run: {read / total:.1%} of {total} prompt tokens read "
          "(tokens the cache model counts)")
    for title, table in (("by wake type", by_wake), ("by call", by_position)):
        print(f"  {title}:")
        for key, (n, size, got) in sorted(table.items(), key=lambda kv: -kv[1][1]):
            print(f"    {key:<52} {n:>5} calls {size:>9} tokens ({size / total:5.1%})"
                  f"  read {got / size if size else 0:5.1%}")
    unread = sum(missed.values()) or 1
    for title, index in (("not read, by why", 0), ("not read, by block", 1)):
        sums: Counter[str] = Counter()
        for why_block, n in missed.items():
            sums[why_block[index]] += n
        print(f"  {title}: " + ", ".join(f"{k} {n / unread:.0%}" for k, n in
                                          sums.most_common()))
    gapped = sum(size for key, (_, size, _) in by_position.items() if "> 1 h" in key)
    no_system = sum(size for key, (_, size, _) in by_position.items() if "no system" in key)
    print(f"  ceiling: {gapped / total:.1%} of prompt tokens are in calls with no call of "
          "the same citizen with a system prompt on the same model in the hour before (no "
          f"cache entry lives that long), {no_system / total:.1%} in calls under every minimum: "
          f"at most {1 - (gapped + no_system) / total:.1%} can be read (more only from "
          "prefixes shared between citizens)")
