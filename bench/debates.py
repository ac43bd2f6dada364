"""Structured debates among three daemons: wall time, moves, model calls and tokens.

    .venv/bin/python bench/debates.py [--debates N] [--participants 2|3] [--local]

Real daemons (three; `--participants 2`: the seed's v0 of two agents, whose figure
is "completes in < 2 minutes"), each move a DEBATE wake rung by the previous mover; the
model is the local Messages API test server playing a scripted debater (zero model
latency: the figure is the protocol's own overhead). The seed's default budgets, scaled
for more than two participants. `--local` also runs one two-participant debate on the embedded Gemma
model in-process (small budgets) and reports its figures.
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


def daemons(count: int, participants: int = 3) -> None:
    from citizen.admin import founding
    from tests.anthropic_server import MessagesServer
    from tests.daemons import daemon_env, start, wait_for
    from tests.debating import scripted_debater

    root = Path(tempfile.mkdtemp(prefix="bench-debates-"))
    os.environ["CIV_ROOT"] = str(root)
    names = ["opus", "mira", "aria"][:participants]
    founding.init(names)
    for name in names:
        # The bench measures the protocol, not the doorbell's hourly window: a three-way
        # debate at the seed's budgets is 14 moves of one citizen, each a rung wake, over
        # the default 12 an hour (budget.max_doorbell_wakes_per_hour); at 12 the debate
        # waits out the hour and the figure is the cap's, not the debate's.
        cfg = root / name / "config.json"
        data = json.loads(cfg.read_text())
        data.setdefault("budget", {})["max_doorbell_wakes_per_hour"] = 100
        cfg.write_text(json.dumps(data, indent=2))
    api = MessagesServer().start()
    api.responder = scripted_debater
    env = daemon_env(root, api)
    procs = [start(env, n, "--interval", "3600", "--first-wake", "3600") for n in names]
    took, moves, calls, tokens = [], [], [], []
    try:
        time.sleep(2)
        for _ in range(count):
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-m", "citizen", "debate", "start",
                                  "--topic", "Tests before features", "--with",
                                  ",".join(names)], env=env, capture_output=True, text=True,
                                 check=True).stdout
            did = out.split()[1]
            wait_for((root / "shared" / "debates" / did / "crux.json").exists, timeout=900,
                     every=0.1)
            took.append(time.monotonic() - started)
            row = next(r for r in json.loads(subprocess.run(
                [sys.executable, "-m", "citizen", "debates", "--json"], env=env,
                capture_output=True, text=True, check=True).stdout) if r["id"] == did)
            moves.append(float(row["moves"]))
            calls.append(float(row["calls"]))
            tokens.append(float(row["tokens"]))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.communicate(timeout=60)
        api.stop()
    scale = f"x{max(1.0, participants / 2):g}"
    show(f"debate start -> crux ({participants} daemons, seed budgets {scale})", took, "s")
    show("moves per debate", moves, "moves")
    show("model calls per debate", calls, "calls")
    show("tokens per debate (test server's counts)", tokens, "tok")


def local() -> None:
    from citizen import civilization, config
    from citizen.admin import founding
    from citizen.llm.local import LocalProvider
    from citizen.wake.flow import run_wake

    root = Path(tempfile.mkdtemp(prefix="bench-debates-local-"))
    os.environ["CIV_ROOT"] = str(root)
    founding.init(["opus", "mira"])
    tpl = config.templates()
    llm = LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices)
    debates = civilization.debates()
    d = debates.start("Citizens should write tests before features", ["opus", "mira"],
                      "operator", budgets={"DISCOVERY": (2, 3), "CRUX_LOCK": (3, 6),
                                           "EVIDENCE": (2, 3)})
    started, calls, tokens = time.monotonic(), 0, 0
    while d.active:
        result = run_wake(d.owed_by(), wake_type="DEBATE", provider=lambda c, s: llm)
        calls += result.calls
        end = json.loads(result.log_path.read_text().splitlines()[-1])
        tokens += int(end.get("tokens_in", 0)) + int(end.get("tokens_out", 0))
        d = debates.load(d.id)
    crux = debates.result(d.id) or {}
    print(f"embedded model, 2 participants: {d.stage} ({d.ended or 'converged'}), "
          f"{d.seq} moves, {calls} calls, {tokens} tokens, {time.monotonic() - started:.1f} s,"
          f" crux validated: {crux.get('validated')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debates", type=int, default=3)
    parser.add_argument("--participants", type=int, choices=(2, 3), default=3)
    parser.add_argument("--local", action="store_true")
    args = parser.parse_args()
    daemons(args.debates, args.participants)
    if args.local:
        local()


if __name__ == "__main__":
    main()
