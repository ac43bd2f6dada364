"""The system blocks of a call: the system prompt and the contexts, within a token budget.

Every call used to carry every context whole - with the seed's caps filled, ≈128k tokens
on each execute call and each vote, more than a wake's dollar budget and eventually more
than the model's window. Now each kind of call gets a budget (`budget.prompt_tokens_*`,
operator-owned): identity always; then the contexts in the order the purpose needs them;
a context that does not fit whole gives its most recent entries that do. The blocks are
built once per wake, so the prefix is byte-identical across the wake's calls and the
provider's cache serves it. The first block is the same bytes for every citizen (the
shared rules and philosophy; the citizen's own block follows it), so with the tools
before it one cache entry serves the whole civilization (issue 45).

The tool loop's conversation is bounded too (`bound_conversation`): past its budget the
oldest tool results are replaced by a line saying so, so a 25-iteration wake cannot
outgrow the window.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from citizen.home.contexts import Context

# Which contexts a purpose needs, most needed first ("identity" is always first).
ORDER = {
    # the work: what it is doing, its goals and skills, then whom it knows and its past
    "execute": ("working", "goals", "skills", "relationships", "history", "peer_monitor",
                "dreams"),
    # a vote, a move, a bid: its values and goals, whom it deals with, its recent past
    "step": ("goals", "relationships", "history", "skills", "peer_monitor", "dreams"),
}
# What changes from wake to wake (the work under way, the last wakes, the memory searched
# for this work): after the stable blocks, so a change here leaves the prefix cached.
VOLATILE = frozenset(("working", "history", "recalled"))
CACHE_5M_MINUTES, CACHE_1H_MINUTES = 5, 60  # the API's two cache lifetimes
RECALL_HITS = 5  # memory search hits offered to a wake's calls
_COMMON = frozenset((
    "this", "that", "with", "from", "your", "have", "will", "what", "when", "which", "into",
    "work", "wake", "task", "tools", "tool", "them", "then", "there", "their", "about",
    "should", "would", "could", "please", "write", "make", "file"))
KEEP_RESULTS = 4  # the most recent tool results always stay whole
DROPPED = "[an earlier result of"
LONG_ARG_TOKENS = 200  # an older call's argument longer than this is shortened past budget


def keywords(text: str, most: int = 20) -> str:
    """The work's distinctive words, for the memory search (no stop words, no repeats)."""
    words = [w for w in re.findall(r"[A-Za-z][\w.-]{3,}", text.lower()) if w not in _COMMON]
    return " ".join(list(dict.fromkeys(words))[:most])


def recalled(hits: list[dict[str, Any]]) -> str:
    """Memory search hits as a block ("" when none)."""
    if not hits:
        return ""
    lines = [f"- [{h.get('day', '?')} {h.get('kind', '')}] {h.get('snippet', '')}" for h in hits]
    return "## recalled (your memory, searched for this work)\n" + "\n".join(lines)


def system_blocks(base: str | Sequence[str], contexts: Mapping[str, Context], budget: int,
                  purpose: str, count: Callable[[str], int], *,
                  recall: str = "") -> tuple[list[str], dict[str, int]]:
    """(blocks, tokens per context included) for one kind of call; `recall` (memory
    search hits for the work) is budgeted after the purpose's first context, if it fits.
    `base`: the leading blocks (the shared system block, then the citizen's own), always
    first and always whole. The budget goes in the purpose's order; the blocks come
    stable first (the leading blocks, identity, the contexts that change rarely), then
    the VOLATILE ones, so the stable prefix (`stable_count` blocks) is the same bytes in
    the next wake."""
    lead = [base] if isinstance(base, str) else list(base)
    blocks, shown = _budgeted(lead, contexts, budget, purpose, count, recall=recall)
    texts = dict(zip([*shown], blocks[len(lead):], strict=True))
    order = [*[k for k in shown if k not in VOLATILE], *[k for k in shown if k in VOLATILE]]
    return [*lead, *[texts[k] for k in order]], shown


def cache_ttl(wake_interval_minutes: float) -> str:
    """The stable prefix's cache lifetime: an hour when the next wake comes after the
    5-minute cache has expired but within the hour (a 1-hour write costs 2x the input
    price, a 5-minute one 1.25x: worth it only if the next wake reads it); else 5 min."""
    return "1h" if CACHE_5M_MINUTES < wake_interval_minutes <= CACHE_1H_MINUTES else "5m"


def stable_count(shown: Mapping[str, int], lead: int = 1) -> int:
    """How many of `system_blocks`'s blocks form its stable prefix (`lead`: how many
    leading blocks it was given)."""
    return lead + sum(1 for k in shown if k not in VOLATILE)


def _budgeted(lead: list[str], contexts: Mapping[str, Context], budget: int, purpose: str,
              count: Callable[[str], int], *, recall: str) -> tuple[list[str], dict[str, int]]:
    blocks, used, shown = list(lead), sum(count(b) for b in lead), {}
    identity = contexts.get("identity")
    if identity is not None and identity.size():
        # Who the citizen is always comes, and is never forgotten (the file keeps it
        # whole); past half the budget the prompt carries its beginning only.
        text = _head(identity.render(), budget // 2, count)
        blocks.append(text)
        shown["identity"] = count(text)
        used += shown["identity"]
    for n, ctype in enumerate(ORDER[purpose]):
        ctx = contexts.get(ctype)
        if ctx is not None and ctx.size() and used < budget:
            text = _fitting(ctx, budget - used, count)
            if text:
                blocks.append(text)
                shown[ctype] = count(text)
                used += shown[ctype]
        if n == 0 and recall and used + count(recall) <= budget:
            blocks.append(recall)
            shown["recalled"] = count(recall)
            used += shown["recalled"]
    return blocks, shown


def _head(text: str, room: int, count: Callable[[str], int]) -> str:
    """`text`, or as much of its beginning as fits `room` tokens, saying so."""
    if count(text) <= room:
        return text
    note = "\n(cut here to fit the prompt budget; the context file keeps it whole)"
    keep = max(0, int(len(text) * (room - count(note)) / count(text)))
    while keep and count(text[:keep] + note) > room:
        keep = int(keep * 0.9)
    return text[:keep] + note


def _fitting(ctx: Context, room: int, count: Callable[[str], int]) -> str:
    """The context whole if it fits in `room` tokens, else its pinned entries (a task's
    own line) and then the most recent entries that fit, with a line saying how many
    are left out ("" if nothing fits)."""
    whole = ctx.render()
    if ctx.tokens(count) <= room:
        return whole
    used = count(f"## {ctx.type}\n(000 older entries not shown)\n")
    keep: set[int] = set()
    size, costs = ctx.size(), ctx.costs(count)  # a view's, kept between wakes, if it holds
    order = ctx.pinned()
    first = set(order)
    order += [i for i in reversed(range(size)) if i not in first]
    for i in order:
        if used + costs[i] <= room:  # one that does not fit is skipped, not the end
            keep.add(i)
            used += costs[i]
    if not keep:
        return ""
    lines = [ctx.line_at(i) for i in sorted(keep)]
    left = size - len(keep)
    return f"## {ctx.type}\n({left} older entries not shown)\n" + "\n".join(lines)


def bound_conversation(messages: list[dict[str, Any]], budget: int,
                       count: Callable[[str], int]) -> int:
    """Shorten the oldest tool traffic - results, and the long arguments of the calls
    (a written file's content) - all but the last KEEP_RESULTS exchanges, until the
    conversation fits `budget` tokens; returns how many blocks were shortened. Ids and
    names stay, so the conversation stays valid; messages are replaced, not changed in
    place (a request already made keeps its own)."""
    where = [(i, j) for i, m in enumerate(messages) if isinstance(m.get("content"), list)
             for j, b in enumerate(m["content"])
             if isinstance(b, dict) and b.get("type") in ("tool_result", "tool_use")]
    total = sum(count(str(m.get("content"))) for m in messages)
    results = [w for w in where if messages[w[0]]["content"][w[1]]["type"] == "tool_result"]
    if len(results) <= KEEP_RESULTS:
        return 0
    cutoff = results[-KEEP_RESULTS][0]  # the message holding the oldest result kept whole
    shortened = 0
    for i, j in where:
        if total <= budget or i >= cutoff - 1:
            break
        block = messages[i]["content"][j]
        new = _shorter(block, count)
        if new is None:
            continue
        content = list(messages[i]["content"])
        content[j] = new
        total -= count(str(messages[i]["content"])) - count(str(content))
        messages[i] = {**messages[i], "content": content}
        shortened += 1
    return shortened


def _shorter(block: dict[str, Any], count: Callable[[str], int]) -> dict[str, Any] | None:
    """The block with its bulk replaced by a note, or None if that would not shrink it."""
    if block["type"] == "tool_result":
        text = str(block.get("content", ""))
        if text.startswith(DROPPED):
            return None
        line = (f"{DROPPED} {count(text)} tokens, dropped to keep the prompt within its "
                "budget; run the call again if you need it]")
        return {**block, "content": line} if count(line) < count(text) else None
    args = dict(block.get("input") or {})
    long = {k for k, v in args.items() if isinstance(v, str) and count(v) > LONG_ARG_TOKENS}
    if not long:
        return None
    for k in long:
        args[k] = f"[{count(args[k])} tokens, dropped to keep the prompt within its budget]"
    return {**block, "input": args}
