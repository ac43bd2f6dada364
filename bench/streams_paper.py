"""ThoughtStream on the seed's own scenario (§4.1 "Queue Saturation Test"): 10 questions
asked at a steady pace without waiting for answers, N citizen daemons, a model server
with 4 parallel slots, and the 45 s generation timeout as a request that fails.

    .venv/bin/python bench/streams.py --scenario paper [--citizens 3 5 10]
        [--server standin llama] [--pace 2.5] [--generation-s 5] [--timeout 45]

Servers: `standin` is a SIMULATION (bench/model_front.py: 4 slots, each generation
`--generation-s`, first come first served beyond them); `llama` is llama.cpp's own
`llama-server --parallel 4` with the packaged model (scripts/llama_server.sh). Both are
reached through the bench's counting front, which sees every request arrive.

The operator's broker.json allows as many working wakes at once as citizens (the
shipped default, the CPUs, would hold 2 generations in flight on 2 cores). The
operator's rules of the run (a copy of templates/ as EXPERIENCE_RULES_DIR): the
model's `max_concurrent_generations` is the server's 4 slots (the coordinated
citizens' semaphore) and `request_timeout_s` 45 (a call past it fails: ProviderError,
the stream wake's FAILED). Bids are the seed's stampede (every citizen claims every
question, `stream_bid: rule`), as §4.2's "all want to respond".

The pace: the seed gives no interval between its questions. Its §1.1 queue - "4/4
slots full + 5 waiting" with three personas - is three questions' answers outstanding
at once, within about one unqueued answer (5 s, §4.1's coordinated mean): a question
every 2.5 s at most, the default `--pace`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.model_front import Front
from bench.stats import pct
from bench.streams import EVERYTHING, QUESTIONS, civilization_of, decision_figures, stop
from shared import clock

PAPER: dict[str, Any] = {"mean_s": (38.0, 5.0), "timeouts": (16, 0), "saturated": (8, 0),
         "peak": ("4/4 + 5", "3/4 + 0"), "ratio": 7.6, "fast_share": 0.95}
GEN_S, PACE_S, TIMEOUT_S, SLOTS = 5.0, 2.5, 45.0, 4


def rules_dir(slots: int, timeout: float) -> Path:
    """The operator's rules for the run: the shipped ones, with the server's slots and
    the timeout (and a doorbell cap no run of ten questions reaches)."""
    here = Path(__file__).resolve().parent.parent / "templates"
    out = Path(tempfile.mkdtemp(prefix="bench-paper-rules-")) / "templates"
    shutil.copytree(here, out)
    models = json.loads((out / "models.json").read_text())
    models["local"].update(max_concurrent_generations=slots, request_timeout_s=timeout)
    (out / "models.json").write_text(json.dumps(models))
    configs = json.loads((out / "citizen_configs.json").read_text())
    configs["defaults"]["budget"]["max_doorbell_wakes_per_hour"] = 1000
    (out / "citizen_configs.json").write_text(json.dumps(configs))
    return out


def operator_dir(citizens: int) -> Path:
    """The operator's broker.json for the run: as many working wakes at once as citizens.
    The paper's personas are processes of their own, each with its request; the shipped
    default (the CPUs: 2 here) held at most 2 generations in flight, below the server's 4
    slots, so nothing queued and the runs measured the permits, not ThoughtStream."""
    out = Path(tempfile.mkdtemp(prefix="bench-paper-operator-"))
    (out / "broker.json").write_text(json.dumps({"max_working_wakes": citizens}))
    return out


@contextmanager
def llama(slots: int) -> Iterator[str]:
    """llama.cpp's server with `slots` parallel slots (each 4096 tokens of context): the
    tests' launcher (its `-np 1` is overridden: llama-server takes the last value)."""
    from tests.llama_server import running

    with running("--parallel", str(slots), ctx=4096 * slots) as url:
        yield url


@contextmanager
def server(kind: str, args: argparse.Namespace) -> Iterator[Front]:
    qs = QUESTIONS[:args.questions]
    if kind == "standin":
        with Front(qs, slots=args.slots, generation_s=args.generation_s) as front:
            yield front
        return
    with llama(args.slots) as upstream, Front(qs, slots=args.slots, upstream=upstream) as front:
        yield front


def settled(streams: Any, sids: list[str]) -> bool:
    """Every question decided, and each granted answer posted or failed (a failed one is
    retried only by a later wake, which no ring starts once the questions are over)."""
    for sid in sids:
        decision = streams.decision(sid)
        if decision is None:
            return False
        got = streams.responses(sid)
        for name in decision["granted"]:
            rec = streams.read_record(sid, name) or {}
            if name not in got and rec.get("action") not in ("FAILED", "TIMEOUT", "SILENT"):
                return False
    return True


def run(n: int, coordinate: bool, front: Front, args: argparse.Namespace) -> dict[str, Any]:
    from citizen import civilization
    from citizen.wake.types.stream import say
    from tests.daemons import heartbeat, start

    root, names = civilization_of(n, front.url, "rule")
    streams = civilization.streams()
    streams.set_room("bench", "balanced", coordinate=coordinate)
    env = {**os.environ, "CIV_ROOT": str(root)}
    for key in ("ANTHROPIC_API_KEY", "EXPERIENCE_LOCAL_URL", "EXPERIENCE_PROVIDER"):
        env.pop(key, None)
    procs = [start(env, name, "--interval", "3600", "--first-wake", "3600") for name in names]
    sids: list[str] = []
    asked: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 120
        while not all(heartbeat(root, name) for name in names) and time.monotonic() < deadline:
            time.sleep(0.2)
        front.reset()
        first = time.monotonic()
        for i, q in enumerate(QUESTIONS[:args.questions]):
            time.sleep(max(0.0, first + i * args.pace - time.monotonic()))
            sid = say(q, room="bench", sender="bench")
            sids.append(sid)
            asked[sid] = streams.load(sid).created
        end = time.monotonic() + args.settle
        while time.monotonic() < end and not (settled(streams, sids) and front.in_flight == 0):
            time.sleep(0.2)
        figures = outcome(streams, sids, asked, front, args)
    finally:
        stop(procs)
    return {"n": n, "mode": "coordinated" if coordinate else "uncoordinated", **figures}


def outcome(streams: Any, sids: list[str], asked: dict[str, float], front: Front,
            args: argparse.Namespace) -> dict[str, Any]:
    """One run's figures: answers' times from the question, failed requests, the
    server's queue, and the decisions."""
    took, granted, failures, unanswered, decisions, first_bid = [], 0, 0, 0, [], []
    for sid in sids:
        decision = streams.decision(sid)
        got = streams.responses(sid)
        # granted, or (without coordination) a claimer that spoke or tried after the decision
        owed = {*(decision or {}).get("granted", []), *got}
        owed |= {c for c in streams.load(sid).thoughts
                 if (streams.read_record(sid, c) or {}).get("action") == "FAILED"}
        for name in sorted(owed):
            granted += 1
            rec = streams.read_record(sid, name) or {}
            failures += int(rec.get("answer_failures", 0))
            if name in got and not got[name].get("failed"):
                took.append(clock.epoch(got[name]["ts"]) - asked[sid])
            else:
                unanswered += 1
        if decision:
            decisions.append(decision)
            bids = [t.ts for t in streams.load(sid).thoughts.values()]
            if bids:  # the coordination itself: from the first bid to the decision
                first_bid.append(1000 * (min(bids) - asked[sid]))
    lat = [float(d["decided_at_ms"]) for d in decisions]
    after_bid = ([a - b for a, b in zip(lat, first_bid, strict=True)]
                 if len(lat) == len(first_bid) else [])
    server = front.figures(args.questions)
    return {
        "server": "stand-in (SIMULATION)" if front.simulated else "llama.cpp --parallel 4",
        "granted": granted, "answers": len(took), "unanswered": unanswered,
        "mean_s": round(statistics.fmean(took), 1) if took else None,
        "p95_s": round(pct(took, 0.95), 1) if took else None,
        "answered_after_45s": sum(t > args.timeout for t in took),
        "timeouts": server["abandoned"], "failed_answer_calls": failures,
        **{k: server[k] for k in ("requests", "other_requests", "saturated_questions",
                                  "queued_requests", "peak_slots", "peak_queued",
                                  "max_queue_wait_s", "served_p50_s")},
        **decision_figures(decisions),
        "first_bid_p50_ms": round(pct(first_bid, 0.5)) if first_bid else None,
        "decided_after_first_bid_p50_ms": round(pct(after_bid, 0.5)) if after_bid else None,
        "decided_after_first_bid_p95_ms": round(pct(after_bid, 0.95)) if after_bid else None,
        "after_first_bid_under_100ms": (round(sum(x < 100 for x in after_bid) / len(after_bid), 2)
                                        if after_bid else None),
    }


def block(r: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """One run's figures, each beside the paper's."""
    coordinated = r["mode"] == "coordinated"
    side = 1 if coordinated else 0
    share = r["decided_under_100ms"]
    return [
        f"  N={r['n']} {r['mode']} on {r['server']}:",
        f"    response      mean {r['mean_s']} s, p95 {r['p95_s']} s over {r['answers']} "
        f"answers of {r['granted']} granted ({r['unanswered']} unanswered; "
        f"{r['answered_after_45s']} after {args.timeout:.0f} s)   "
        f"paper: {PAPER['mean_s'][side]:.0f} s",
        f"    timeouts      {r['timeouts']} requests given up at {args.timeout:.0f} s "
        f"({r['failed_answer_calls']} failed answer calls in the citizens' records)   "
        f"paper: {PAPER['timeouts'][side]}" + ("; goal 0" if coordinated else ""),
        f"    saturation    {r['saturated_questions']}/{args.questions} questions had a request "
        f"waiting beyond the {args.slots} slots ({r['queued_requests']} of {r['requests']} "
        f"requests waited)   paper: {PAPER['saturated'][side]}/10",
        f"    peak          {r['peak_slots']}/{args.slots} slots + {r['peak_queued']} queued "
        f"(longest wait for a slot: {r['max_queue_wait_s']} s)   paper: {PAPER['peak'][side]}",
        f"    decisions     p50 {r['decision_p50_ms']} ms, p95 {r['decision_p95_ms']} ms, "
        f"under 100 ms {'-' if share is None else f'{share:.0%}'}, early exits "
        f"{r['early_exit_share']}   goal: 95 % under 100 ms",
        f"                  of which the first bid came p50 {r['first_bid_p50_ms']} ms after the "
        f"question; from it the decision took p50 {r['decided_after_first_bid_p50_ms']} ms, "
        f"p95 {r['decided_after_first_bid_p95_ms']} ms "
        f"({r['after_first_bid_under_100ms']} under 100 ms)",
    ]


def verdict(before: dict[str, Any], after: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """The headline for one N and server, against the goals, and why a figure falls short."""
    ratio = (round(before["mean_s"] / after["mean_s"], 1)
             if before["mean_s"] and after["mean_s"] else None)
    share = after["decided_under_100ms"]
    fast = share is not None and share >= PAPER["fast_share"]
    lines = [f"  N={after['n']} {after['server']}: mean latency {ratio}x "
             f"(goal >= {PAPER['ratio']}x: "
             f"{'met' if ratio and ratio >= PAPER['ratio'] else 'SHORT'}); timeouts "
             f"{before['timeouts']} -> {after['timeouts']} (goal 0 coordinated: "
             f"{'met' if after['timeouts'] == 0 else 'SHORT'}); saturation "
             f"{before['saturated_questions']}/{args.questions} -> {after['saturated_questions']}/"
             f"{args.questions}; decisions under 100 ms "
             f"{'-' if share is None else f'{share:.0%}'} "
             f"(goal 95 %: {'met' if fast else 'SHORT'})"]
    why = []
    n = after["n"]
    if not ratio or ratio < PAPER["ratio"]:
        why.append(f"ratio: a citizen's daemon runs one wake at a time and answers its "
                   f"questions "
                   f"one after another, so without coordination the server holds at most N={n} "
                   f"requests (measured peak {before['peak_slots']}+{before['peak_queued']}); "
                   f"the uncoordinated mean ({before['mean_s']} s) is each citizen's own backlog, "
                   f"and the coordinated one ({after['mean_s']} s) is one generation plus "
                   f"the wake's start (first bid p50 {after['first_bid_p50_ms']} ms)")
    if before["timeouts"] == 0 and n > args.slots:
        why.append(f"no uncoordinated timeouts: with at most {n} requests, one waits at most "
                   f"{-(-n // args.slots) - 1} generations for a slot (measured longest wait "
                   f"{before['max_queue_wait_s']} s) - under the {args.timeout:.0f} s timeout")
    if after["timeouts"]:
        why.append(f"coordinated timeouts: {after['timeouts']} requests passed "
                   f"{args.timeout:.0f} s with at most {after['peak_slots']}+"
                   f"{after['peak_queued']} in flight; a request answered took p50 "
                   f"{after['served_p50_s']} s (None: none finished) - the model on this CPU, "
                   f"not the queue")
    if not fast:
        why.append(f"decisions: the first bid comes p50 {after['first_bid_p50_ms']} ms after the "
                   f"question (the doorbell rings the daemon, which starts a wake process); from "
                   f"the first bid the decision takes p50 "
                   f"{after['decided_after_first_bid_p50_ms']} ms "
                   f"({after['after_first_bid_under_100ms']} under 100 ms)")
    return lines + [f"    why {w}" for w in why]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citizens", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--server", nargs="+", choices=["standin", "llama"],
                        default=["standin", "llama"])
    parser.add_argument("--pace", type=float, default=PACE_S, help="seconds between questions")
    parser.add_argument("--generation-s", type=float, default=GEN_S,
                        help="the stand-in's time per answer (the paper's 5 s)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--slots", type=int, default=SLOTS)
    parser.add_argument("--settle", type=float, default=150.0,
                        help="seconds after the last question to wait for the answers")
    args = parser.parse_args(argv)
    os.environ["EXPERIENCE_RULES_DIR"] = str(rules_dir(args.slots, args.timeout))
    os.environ["EXPERIENCE_OPERATOR_DIR"] = str(operator_dir(max(args.citizens)))
    print(f"ThoughtStream, the paper's scenario: {args.questions} questions every {args.pace} s "
          f"(not waiting for answers), every citizen claims each (focus: {EVERYTHING[:30]}...), "
          f"{args.slots} model slots, {args.timeout:.0f} s request timeout", flush=True)
    for kind in args.server:
        if kind == "standin":
            print(f"== stand-in server: a SIMULATION, {args.slots} slots, {args.generation_s} s "
                  "per answer, first come first served beyond them", flush=True)
        else:
            print(f"== llama.cpp llama-server --parallel {args.slots}, the packaged model",
                  flush=True)
        for n in args.citizens:
            pair = []
            for coordinate in (False, True):
                with server(kind, args) as front:  # a fresh server per run: nothing left over
                    pair.append(run(n, coordinate, front, args))
                print(json.dumps(pair[-1]), flush=True)
                print("\n".join(block(pair[-1], args)), flush=True)
            print("\n".join(verdict(pair[0], pair[1], args)), flush=True)
