"""The system blocks of a call: the system prompt and the contexts, within a token budget.

Every call used to carry every context whole - with the seed's caps filled, ≈128k tokens
on each execute call and each vote, more than a wake's dollar budget and eventually more
than the model's window. Now each kind of call gets a budget (`budget.prompt_tokens_*`,
operator-owned): identity always; then the contexts in the order the purpose needs them;
a context that does not fit whole gives its most recent entries that do. The blocks are
built once per wake, so the prefix is byte-identical across the wake's calls and the
provider's cache serves it.

The tool loop's conversation is bounded too (`bound_conversation`): past its budget the
oldest tool results are replaced by a line saying so, so a 25-iteration wake cannot
outgrow the window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from citizen.contexts import Context

# Which contexts a purpose needs, most needed first ("identity" is always first).
ORDER = {
    # the work: what it is doing, its goals and skills, then whom it knows and its past
    "execute": ("working", "goals", "skills", "relationships", "history", "peer_monitor",
                "dreams"),
    # a vote, a move, a bid: its values and goals, whom it deals with, its recent past
    "step": ("goals", "relationships", "history", "skills", "peer_monitor", "dreams"),
}
KEEP_RESULTS = 4  # the most recent tool results always stay whole
DROPPED = "[an earlier result of"


def system_blocks(base: str, contexts: Mapping[str, Context], budget: int, purpose: str,
                  count: Callable[[str], int]) -> tuple[list[str], dict[str, int]]:
    """(blocks, tokens per context included) for one kind of call."""
    blocks, used, shown = [base], count(base), {}
    identity = contexts.get("identity")
    if identity is not None and identity.entries:
        text = identity.render()  # who the citizen is is never cut
        blocks.append(text)
        shown["identity"] = count(text)
        used += shown["identity"]
    for ctype in ORDER[purpose]:
        ctx = contexts.get(ctype)
        if ctx is None or not ctx.entries or used >= budget:
            continue
        text = _fitting(ctx, budget - used, count)
        if text:
            blocks.append(text)
            shown[ctype] = count(text)
            used += shown[ctype]
    return blocks, shown


def _fitting(ctx: Context, room: int, count: Callable[[str], int]) -> str:
    """The context whole if it fits in `room` tokens, else its most recent entries that
    do, with a line saying how many older ones are left out ("" if none fits)."""
    whole = ctx.render()
    if count(whole) <= room:
        return whole
    kept: list[str] = []
    used = count(f"## {ctx.type}\n(000 older entries not shown)\n")
    for entry in reversed(ctx.entries):
        line = f"- {entry['text']}"
        cost = count(line) + 1
        if used + cost > room:
            break
        kept.append(line)
        used += cost
    if not kept:
        return ""
    left = len(ctx.entries) - len(kept)
    return f"## {ctx.type}\n({left} older entries not shown)\n" + "\n".join(reversed(kept))


def bound_conversation(messages: list[dict[str, Any]], budget: int,
                       count: Callable[[str], int]) -> int:
    """Replace the oldest tool results (all but the last KEEP_RESULTS) by a short line
    until the conversation fits `budget` tokens; returns how many were replaced. The
    messages are replaced, not changed in place: a request already made keeps its own."""
    where = [(i, j) for i, m in enumerate(messages) if isinstance(m.get("content"), list)
             for j, b in enumerate(m["content"])
             if isinstance(b, dict) and b.get("type") == "tool_result"
             and not str(b.get("content", "")).startswith(DROPPED)]
    total = sum(count(str(m.get("content"))) for m in messages)
    dropped = 0
    for i, j in where[:-KEEP_RESULTS] if len(where) > KEEP_RESULTS else []:
        if total <= budget:
            break
        block = messages[i]["content"][j]
        before = count(str(block.get("content", "")))
        line = (f"{DROPPED} {before} tokens, dropped to keep the prompt within its budget; "
                "run the call again if you need it]")
        content = list(messages[i]["content"])
        content[j] = {**block, "content": line}
        messages[i] = {**messages[i], "content": content}
        total -= before - count(line)
        dropped += 1
    return dropped
