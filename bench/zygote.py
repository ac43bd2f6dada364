"""Would forking daemons from one parent make a sleeping citizen light? (issue 33)

    .venv/bin/python bench/zygote.py [-n 5] [--seconds 30]

A parent imports everything a daemon imports, collects and freezes its objects
(`gc.freeze()`, so the collector does not write to the pages the children share), then
forks one child per citizen of a fresh dev-mode civilization; each child runs its
citizen's `Daemon` with a wake every second (idle wakes, gated in the daemon). After
`--seconds`, the children's USS is what each holds of its own: the pages it wrote since
the fork (reference counts, the heap of its scheduler and wakes). Compare with a daemon
started on its own (`bench/daemons.py`, 28 MB) and with one process for all
(`bench/daemons.py --crowd`). Prints medians; nothing here asserts.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.daemons import found, uss_kb  # noqa: E402
from bench.stats import show  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-zygote-") as top:
        os.environ["CIV_ROOT"] = top
        names = found(args.n)
        from citizen.daemon.process import Daemon  # after CIV_ROOT is set

        gc.collect()
        gc.freeze()
        children = []
        for name in names:
            pid = os.fork()
            if pid == 0:  # the child: one citizen's daemon, until killed
                try:
                    Daemon(name, interval_s=1.0, first_wake_s=0.0).run()
                finally:
                    os._exit(0)
            children.append(pid)
        time.sleep(args.seconds)
        uss = [float(uss_kb(pid)) for pid in children]
        wakes = sum(len(list((Path(top) / n / "logs" / "wakes").glob("*.jsonl")))
                    for n in names)
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    print(f"# {args.n} daemons forked from one parent (gc.freeze), a wake a second, "
          f"{args.seconds:.0f} s; {wakes} idle wakes in all")
    show("forked daemon USS", uss, "MB", 1 / 1024)


if __name__ == "__main__":
    main()
