"""Thought World consensus: how long a proposal takes among three daemons, and what it costs.

    .venv/bin/python bench/consensus.py [--proposals N] [--local]

Three real daemons ring each other's doorbells through a whole proposal (propose,
verify, integrate, execute, check, record) with the model served by the local
Messages API test server (zero model latency: the figure is the protocol's own
overhead - wake processes, records, git). `--local` also runs one proposal on the
embedded Gemma model in-process and reports its wall time, calls and tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import show  # noqa: E402


def daemons(proposals: int) -> None:
    from citizen.admin import founding
    from tests.anthropic_server import MessagesServer
    from tests.daemons import daemon_env, start, wait_for
    from tests.thoughtworld import CITIZENS, HELLO, scripted_council

    root = Path(tempfile.mkdtemp(prefix="bench-consensus-"))
    os.environ["CIV_ROOT"] = str(root)
    founding.init(list(CITIZENS))
    api = MessagesServer().start()
    api.responder = scripted_council
    env = daemon_env(root, api)
    procs = [start(env, n, "--interval", "3600", "--first-wake", "3600") for n in CITIZENS]
    took, calls = [], []
    try:
        time.sleep(2)  # the daemons are up
        for n in range(proposals):
            before = len(api.requests)
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-m", "citizen", "consensus", "start",
                                  "--by", CITIZENS[n % 3], HELLO.replace("hello", f"hello{n}")],
                                 env=env, capture_output=True, text=True, check=True).stdout
            pid = out.split()[1].rstrip(":")
            view = root / "shared" / "proposals" / "approved" / f"{pid}.json"
            wait_for(view.exists, timeout=120, every=0.02)
            took.append(time.monotonic() - started)
            calls.append(len(api.requests) - before)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=60)
        api.stop()
    show("proposal start -> approved, committed, recorded", took, "s")
    show("model calls per proposal (incl. tool selection)", [float(c) for c in calls], "calls")


def local() -> None:
    from citizen import civilization, config
    from citizen.admin import founding
    from citizen.llm.local import LocalProvider
    from citizen.wake.flow import run_wake
    from tests.thoughtworld import CITIZENS, HELLO

    root = Path(tempfile.mkdtemp(prefix="bench-consensus-local-"))
    os.environ["CIV_ROOT"] = str(root)
    founding.init(list(CITIZENS))
    tpl = config.templates()
    llm = LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices)
    commons = civilization.consensus(tpl)
    pid = commons.request(HELLO, "opus", "operator").id
    started = time.monotonic()
    wakes, calls, tokens = 0, 0, 0
    d = commons.load(pid)
    while d.phase not in ("done", "human") and wakes < 30:
        result = run_wake(d.owed_by, wake_type="CONSENSUS", provider=lambda c, s: llm)
        wakes += 1
        calls += result.calls
        end = [json.loads(x) for x in result.log_path.read_text().splitlines()][-1]
        tokens += int(end.get("tokens_in", 0)) + int(end.get("tokens_out", 0))
        d = commons.load(pid)
    print(f"embedded model: {d.phase} {d.result} (round {d.round}, stakes {d.stakes}) in "
          f"{time.monotonic() - started:.1f} s, {wakes} wakes, {calls} model calls, "
          f"{tokens} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=10)
    parser.add_argument("--local", action="store_true")
    args = parser.parse_args()
    daemons(args.proposals)
    if args.local:
        local()


if __name__ == "__main__":
    main()
