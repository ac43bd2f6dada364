"""Writer processes started together, for the contention benches (bench/documents.py,
bench/commons_engines.py): each prints a line once its imports are done and waits for
"go" on its stdin, so a figure is N writers contending, not N interpreters starting up."""

from __future__ import annotations

import subprocess
import time


def race(procs: list[subprocess.Popen[str]], what: str) -> float:
    """Wait until every writer is ready, say "go" to all, wait for all to end; the wall
    seconds from "go" to the last end.

    :raises SystemExit: a writer failed (`what` names the kind).
    """
    pipes = [(p.stdin, p.stdout) for p in procs if p.stdin and p.stdout]
    for _, said in pipes:  # every writer ready (a failed one reads "": seen below)
        said.readline()
    started = time.perf_counter()
    for go, said in pipes:
        go.write("go\n")
        go.close()
        said.close()
    if any(p.wait() for p in procs):
        raise SystemExit(f"a {what} writer failed")
    return time.perf_counter() - started
