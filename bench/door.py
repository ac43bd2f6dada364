"""What the trusted door costs (issue 42): the state file and history operations every
wake, gate and page does, through shared/atomic.py and shared/records.py - on this
checkout and, with --old, on another checkout in the same run, on the same files.

    .venv/bin/python bench/door.py                          # this checkout
    git worktree add /tmp/before-door ffe564b               # the code before the door
    .venv/bin/python bench/door.py --old /tmp/before-door   # both, and new/old ratios

Each figure is one operation's wall time over `--n` runs (after a warm-up), timed in a
child process that imports only that checkout's `shared`: a 1 KB state file written
atomically and read back, a JSONL history of 200 wake-log lines (about 2 KB each) read
whole, a line appended, and a 1 KB commons record read with its author checked.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from bench.stats import pct  # noqa: E402 - after the checkout is on the path

CHILD = r'''
import json, os, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from shared import atomic, records
n = int(sys.argv[2])
tmp = Path(tempfile.mkdtemp())
state = {"schema_version": 1, "marks": {f"k{i}": "v" * 20 for i in range(30)}}
line = {"event": "llm_call", "request": {"messages": [{"role": "user", "content": [
    {"type": "text", "text": "x" * 40}]} for _ in range(20)]}}
log = tmp / "1-TASK.jsonl"
for _ in range(200):
    atomic.append_line(log, line)
rec = tmp / "rec" / "vote-opus.json"
rec.parent.mkdir()
rec.write_text(json.dumps({"author": "opus", "vote": "yes", "why": "w" * 900}))
def timed(fn):
    fn()
    out = []
    for _ in range(n):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return out
figures = {
    "write_json (1 KB, atomic)": timed(lambda: atomic.write_json(tmp / "state.json", state)),
    "read_json (1 KB)": timed(lambda: atomic.read_json(tmp / "state.json")),
    "read_jsonl (200 lines, 2 KB each)": timed(lambda: atomic.read_jsonl(log)),
    "append_line (one wake-log line)": timed(lambda: atomic.append_line(tmp / "a.jsonl", line)),
    "records.read (1 KB, author checked)": timed(
        lambda: records.read(rec, "opus", enforce=False)),
}
print(json.dumps(figures))
'''


def measure(checkout: Path, n: int) -> dict[str, list[float]]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
    out = subprocess.run([sys.executable, f.name, str(checkout), str(n)], check=True,
                         capture_output=True, text=True).stdout
    Path(f.name).unlink()
    figures: dict[str, list[float]] = json.loads(out)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="another checkout, measured alongside")
    parser.add_argument("--n", type=int, default=400, help="runs of each operation")
    args = parser.parse_args()
    new = measure(HERE, args.n)
    old = measure(args.old, args.n) if args.old else {}
    for name, values in new.items():
        med, p95 = sorted(values)[len(values) // 2], pct(values, 0.95)
        text = f"{name:<40} new median {med * 1e6:8.1f} us  p95 {p95 * 1e6:8.1f} us"
        if name in old:
            before = old[name]
            omed = sorted(before)[len(before) // 2]
            text += (f" | old median {omed * 1e6:8.1f} us  p95 {pct(before, 0.95) * 1e6:8.1f}"
                     f" us | new/old {med / omed:5.2f}")
        print(text)


if __name__ == "__main__":
    main()
