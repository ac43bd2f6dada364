"""What the sandbox costs a tool call: `shell_command 'true'` with and without bubblewrap.

    .venv/bin/python bench/sandbox.py [--calls 50] [--srt PATH/TO/srt]

Prints the median and p95 of each, and what the sandbox adds (issue 15's goal: ≤ 20 ms).
With --srt (Anthropic's sandbox runtime, `npm install @anthropic-ai/sandbox-runtime`;
it needs socat), also the bare command `true` in our bubblewrap argv and in `srt` with
the equivalent settings (the secrets file unreadable, writes only in the home, no
network), the comparison DEPLOY.md §8 chose by.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stats import pct, show


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--srt", help="the srt binary, to compare with bubblewrap alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as root:
        os.environ["CIV_ROOT"] = root
        from citizen import config
        from citizen.admin import founding
        from citizen.config import paths
        from citizen.home.contexts import ContextStore
        from citizen.home.memory import Memory
        from citizen.home.tasks import TaskQueue
        from citizen.llm.base import estimate_tokens
        from citizen.tools import core_tools, sandbox
        from citizen.tools.base import ToolEnv

        founding.init(["opus", "mira", "aria"])
        home = paths.home("opus")
        cfg = config.load_citizen("opus")
        contexts = ContextStore(home.contexts, cfg.context_limits, estimate_tokens).load_all()
        env = ToolEnv(home, cfg, config.load_secrets("opus"), TaskQueue(home.tasks),
                      Memory(home.memory), contexts)
        shell = core_tools()["shell_command"]
        times: dict[str, list[float]] = {}
        for label, mode in (("unconfined (EXPERIENCE_SANDBOX=off)", "off"),
                            ("bubblewrap sandbox", "required")):
            os.environ[sandbox.MODE_ENV] = mode
            shell.run(env, {"command": "true"})  # warm the page cache
            samples = []
            for _ in range(args.calls):
                started = time.perf_counter()
                shell.run(env, {"command": "true"})
                samples.append(time.perf_counter() - started)
            times[label] = samples
            show(f"shell_command 'true', {label}", samples, "ms", 1000)
        plain, boxed = times.values()
        added = statistics.median(boxed) - statistics.median(plain)
        added_p95 = pct(boxed, 0.95) - pct(plain, 0.95)
        print(f"added by the sandbox: median {1000 * added:.1f} ms, p95 "
              f"{1000 * added_p95:.1f} ms")
        if args.srt:
            _compare_srt(args.srt, sandbox.wrap(home, ["true"], trust=sandbox.Trust.OWN),
                         home.dir, args.calls)


def _timed(argv: list[str], cwd: Path, calls: int) -> list[float]:
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)  # warm up
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
        samples.append(time.perf_counter() - started)
    return samples


def _compare_srt(srt: str, boxed: list[str], home: Path, calls: int) -> None:
    settings = home.parent / "srt-settings.json"
    settings.write_text(json.dumps({
        "filesystem": {"denyRead": [str(home / ".env")], "allowWrite": [str(home)],
                       "denyWrite": [str(home / "config.json")]},
        "network": {"allowedDomains": [], "deniedDomains": []}}))
    ours = _timed(boxed, home, calls)
    theirs = _timed([srt, "--settings", str(settings), "true"], home, calls)
    show("`true` in our bubblewrap argv", ours, "ms", 1000)
    show("`true` in srt 0.0.83", theirs, "ms", 1000)
    print(f"srt / bubblewrap: median x{statistics.median(theirs) / statistics.median(ours):.1f}")


if __name__ == "__main__":
    main()
