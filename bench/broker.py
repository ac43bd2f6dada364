"""What the broker costs: time added per model call, memory, and how far it over-reserves.

    .venv/bin/python bench/broker.py                 # 1 and 100 citizens, the task corpus
    .venv/bin/python bench/broker.py --calls 1000 --citizens 100 --no-corpus
    .venv/bin/python bench/broker.py --registered 1000 --citizens 100 --no-corpus

Against a zero-latency upstream (tests/anthropic_server.py answering at once), the same
request is sent directly (httpx2 over TCP, as a daemon holding the key would) and through
the broker (httpx2 over its Unix socket, as every daemon now does), alternating, so both
see the same machine. Added time = through the broker minus direct. Then N citizens
call at once (N threads in 4 processes, each citizen its own name and caps). The broker
runs as in dev mode (`citizen broker run`, its ledger durable: a reservation is committed
before each call is forwarded). Last, the 21-task corpus (bench/tasks.py, the competent
agent behind the Messages API through the real SDK) runs through the broker, and each
call's reservation is set against what it settled at.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import pct, show

BODY = {"model": "claude-opus-4-6", "max_tokens": 256,
        "messages": [{"role": "user", "content": "Say hi in one word."}]}


def _answer(_body: dict[str, Any]) -> dict[str, Any]:
    from tests.anthropic_server import text

    return text("hi", input_tokens=12, output_tokens=2)


def _clients(socket: str, url: str, citizen: str) -> tuple[Any, Any]:
    import httpx2

    from tests.anthropic_server import API_KEY

    direct = httpx2.Client(base_url=url, timeout=60,
                           headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"})
    broker = httpx2.Client(transport=httpx2.HTTPTransport(uds=socket), base_url="http://broker",
                           timeout=60, headers={"x-experience-citizen": citizen,
                                                "anthropic-version": "2023-06-01"})
    return direct, broker


def _timed(client: Any) -> float:
    started = time.perf_counter()
    resp = client.post("/v1/messages", json=BODY)
    elapsed = time.perf_counter() - started
    if resp.status_code != 200:
        raise SystemExit(f"call failed: {resp.status_code} {resp.text[:200]}")
    return elapsed


def alternate(socket: str, url: str, citizen: str, calls: int) -> tuple[list[float], list[float]]:
    """(direct, through the broker) latencies of `calls` calls each, alternating."""
    direct, broker = _clients(socket, url, citizen)
    d, b = [], []
    for _ in range(calls):
        d.append(_timed(direct))
        b.append(_timed(broker))
    return d, b


def _worker(args: tuple[str, str, list[str], int]) -> tuple[list[float], list[float]]:
    socket, url, names, calls = args
    out: list[tuple[list[float], list[float]]] = []
    barrier = threading.Barrier(len(names))

    def one(name: str) -> None:
        barrier.wait()
        out.append(alternate(socket, url, name, calls))

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for d, _ in out for x in d], [x for _, b in out for x in b]


def concurrent(socket: str, url: str, names: list[str], calls: int) -> tuple[list[float],
                                                                             list[float]]:
    groups = [names[i::4] for i in range(4)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        parts = pool.map(_worker, [(socket, url, g, calls) for g in groups if g])
    return [x for d, _ in parts for x in d], [x for _, b in parts for x in b]


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 2**20


def corpus_ratios() -> list[float]:
    """Reserved / settled per call of the task corpus, through the broker."""
    from bench import tasks
    from citizen.broker import service
    from tests.anthropic_server import MessagesServer

    ratios: list[float] = []

    def collect(home: Path) -> None:
        ledger = home.parent / ".broker" / service.LEDGER  # this task's civilization
        if not ledger.is_file():
            return
        db = sqlite3.connect(ledger)
        try:
            ratios.extend(r / c for r, c in db.execute(
                "SELECT reserved_usd, cost_usd FROM calls WHERE state = 'settled' "
                "AND cost_usd > 0"))
        finally:
            db.close()

    api = MessagesServer().start()
    try:
        for task in tasks.TASKS:
            if not task.mail:
                tasks.run_task(task, "api", api=api, before_cleanup=collect)
    finally:
        api.stop()
    return ratios


def single(socket: str, url: str, citizen: str, calls: int) -> None:
    """One citizen: each call direct and through the broker, alternating."""
    d, b = alternate(socket, url, citizen, calls)
    show("1 citizen: direct call", d, "ms", 1000)
    show("1 citizen: through the broker", b, "ms", 1000)
    added = [y - x for x, y in zip(d, b, strict=True)]
    print(f"{'1 citizen: added by the broker':<52} median "
          f"{statistics.median(added) * 1000:9.2f} ms    p95 {pct(added, 0.95) * 1000:9.2f} "
          f"ms  (pairs; ratio of medians {statistics.median(b) / statistics.median(d):.2f})")


def loaded(socket: str, url: str, names: list[str], each: int, pid: int) -> float:
    """Every citizen at once; the broker's peak RSS meanwhile (MB)."""
    peak = [rss_mb(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak.append(rss_mb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    d, b = concurrent(socket, url, names, each)
    stop.set()
    sampler.join()
    n = len(names)
    show(f"{n} citizens at once: direct call", d, "ms", 1000)
    show(f"{n} citizens at once: through the broker", b, "ms", 1000)
    print(f"{f'{n} citizens at once: added (medians)':<52} "
          f"{(statistics.median(b) - statistics.median(d)) * 1000:9.2f} ms, p95s "
          f"{(pct(b, 0.95) - pct(d, 0.95)) * 1000:.2f} ms; ratio of medians "
          f"{statistics.median(b) / statistics.median(d):.2f}")
    return max(peak)


def make_citizens(root: str, n: int, url: str) -> list[str]:
    from citizen.admin import founding
    from tests.anthropic_server import API_KEY

    names = [f"c{i:03d}" for i in range(n)]
    for name in names:
        founding.init_citizen(name, {"email": f"{name}@bench", "focus": "bench"})
        home = Path(root) / name
        (home / ".env").write_text(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL={url}\n")
        cfg = json.loads((home / "config.json").read_text())
        cfg["budget"] = {"max_usd_per_day": 1000, "max_calls_per_minute": 100000,
                         "max_concurrent_calls": 64}
        (home / "config.json").write_text(json.dumps(cfg))
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per side, one citizen")
    parser.add_argument("--citizens", type=int, default=100, help="citizens calling at once")
    parser.add_argument("--registered", type=int, default=0,
                        help="citizens with a home (at least --citizens); the rest never call")
    parser.add_argument("--each", type=int, default=10, help="calls per side per citizen")
    parser.add_argument("--no-corpus", action="store_true")
    args = parser.parse_args()

    from citizen.access import client
    from citizen.broker import service
    from citizen.config import paths
    from tests.anthropic_server import MessagesServer

    api = MessagesServer().start()
    api.responder = _answer
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as root:
        os.environ["CIV_ROOT"] = root
        names = make_citizens(root, max(args.registered, args.citizens),
                              api.url)[:args.citizens]
        socket = str(client.ensure())
        pid = int((paths.broker_state() / "broker.pid").read_text())
        alternate(socket, api.url, names[0], 20)  # warm both paths
        rest = rss_mb(pid)
        single(socket, api.url, names[0], args.calls)
        peak = loaded(socket, api.url, names, args.each, pid)
        db = sqlite3.connect(service.ledger_path())
        states = dict(db.execute("SELECT state, count(*) FROM calls GROUP BY state").fetchall())
        db.close()
        expected = 20 + args.calls + len(names) * args.each
        print(f"ledger: {states} (calls made through the broker: {expected}; "
              f"not settled: {expected - states.get('settled', 0)})")
        print(f"broker RSS: {rest:.1f} MB at rest, {peak:.1f} MB peak under {len(names)} "
              "citizens")
    api.stop()
    if not args.no_corpus:
        show("task corpus: reserved / settled per call", corpus_ratios(), "x")


if __name__ == "__main__":
    main()
