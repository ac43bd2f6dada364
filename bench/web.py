"""What the operator waits for in the browser: the dashboard's pages, and its memory.

    .venv/bin/python bench/web.py [--citizens 100] [--wakes 100] [--deep 10000] [--runs 15]

A dev-mode civilization in a temporary root (bench/cli.py:populate: `--citizens` homes with
`--wakes` ended wake logs each), plus one wake of c001 with `--iterations` model calls and
as many tool calls. The real service - `citizen web --listen 127.0.0.1:PORT` in a
subprocess, the app of citizen.web.app:make_app under uvicorn - logged in with the dev-mode
token (POST /login, then the session cookie). Each load is a new connection, from connect to
the last byte of the page. Timed: the civilization page `/`, the long wake's transcript
`/wakes/c001/N`, the timeline `/wakes/c000`; then c000 gets `--deep` wakes in all and its
timeline is timed again (paged, 50 a page: the first page should not grow with the log
count; a status filter reads every log's ends). The service's RSS from /proc: idle after
start, and after 20 page loads. Prints medians and p95s (bench/stats.py).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cli import CITIZEN, populate
from bench.stats import show
from citizen.config import paths
from citizen.home.wakelog import WakeLog
from citizen.web.auth import COOKIE, load_token

IDLE_S = 2.0  # the service settles (imports done, first GC) before its rest RSS is read
LOADS = 20  # page loads between the rest RSS and the working one


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def write_wake(name: str, number: int, iterations: int) -> None:
    """An ended TASK wake of `name` with `iterations` model calls, each followed by a tool
    call (the shape bench/cli.py:populate writes, longer)."""
    log = WakeLog(paths.home(name), number, "TASK")
    log.event("wake_start", citizen=name, type="TASK", slot=number % 10, pid=1,
              reason="scheduled")
    log.event("gate", verdict="work", reason="a task is waiting")
    for i in range(iterations):
        log.event("llm_call", purpose="execute", model="m", tokens_in=9000 + 400 * i,
                  tokens_out=300, cost_usd=0.01, latency_s=2.0,
                  reply={"text": f"step {i}: writing the next note", "tool_calls": [
                      {"name": "write_file", "input": {"path": f"notes/{i}.md"}}]})
        log.event("tool_call", tool="write_file", args={"path": f"notes/{i}.md"},
                  result=f"wrote {100 + i} characters")
    log.event("wake_end", status="ok", reason="task done", cost_usd=0.01 * iterations,
              calls=iterations, duration_s=40.0 * iterations)


class Service:
    """`citizen web` on a free loopback port, for the civilization at $CIV_ROOT."""

    def __init__(self) -> None:
        self.port = free_port()
        started = time.perf_counter()
        self.proc = subprocess.Popen([CITIZEN, "web", "--listen", f"127.0.0.1:{self.port}"],
                                     env=os.environ.copy(), stderr=subprocess.DEVNULL)
        self.cookie = ""
        deadline = time.monotonic() + 60
        while True:  # wait until it answers: the login form is served without a session
            try:
                self.get("/login")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("`citizen web` never answered - run it by hand "
                                       "to see why") from None
                time.sleep(0.05)
        self.start_s = time.perf_counter() - started

    def login(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/login", body=urlencode({"token": load_token()}),
                         headers={"content-type": "application/x-www-form-urlencoded"})
            response = conn.getresponse()
            response.read()
            set_cookie = response.getheader("set-cookie") or ""
        finally:
            conn.close()
        if response.status != 303 or not set_cookie.startswith(f"{COOKIE}="):
            raise RuntimeError(f"login refused ({response.status}) - is the token file "
                               "the service reads the one this process read?")
        self.cookie = set_cookie.split(";", 1)[0]

    def get(self, path: str) -> float:
        """Seconds to load `path` whole on a new connection."""
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("GET", path, headers={"cookie": self.cookie, "accept": "text/html"})
            response = conn.getresponse()
            response.read()
        finally:
            conn.close()
        took = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"GET {path} answered {response.status}")
        return took

    def timed(self, path: str, runs: int) -> list[float]:
        return [self.get(path) for _ in range(runs)]

    def rss_mb(self) -> float:
        """The service's resident memory (VmRSS), in MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for pid {self.proc.pid}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--citizens", type=int, default=100)
    parser.add_argument("--wakes", type=int, default=100, help="wake logs per citizen")
    parser.add_argument("--deep", type=int, default=10000,
                        help="c000's wakes in all for the second timeline figure")
    parser.add_argument("--iterations", type=int, default=25,
                        help="model calls (and tool calls) of the timed transcript's wake")
    parser.add_argument("--runs", type=int, default=15)
    opts = parser.parse_args()
    if opts.citizens < 2 or opts.wakes < 1 or opts.deep < opts.wakes:
        parser.error("need --citizens >= 2, --wakes >= 1 and --deep >= --wakes")
    root = Path(tempfile.mkdtemp(prefix="bench-web-"))
    service: Service | None = None
    try:
        started = time.perf_counter()
        populate(root, opts.citizens, opts.wakes)
        long_wake = opts.wakes + 1
        write_wake("c001", long_wake, opts.iterations)
        print(f"{opts.citizens} citizens x {opts.wakes} wakes "
              f"({opts.citizens * opts.wakes} in all), written in "
              f"{time.perf_counter() - started:.0f} s; runs={opts.runs}")
        load_token()  # dev mode: made here once, read by the service
        service = Service()
        print(f"{'citizen web: start to first answer':<52} {service.start_s * 1000:9.2f} ms")
        time.sleep(IDLE_S)
        print(f"{'citizen web: RSS at rest':<52} {service.rss_mb():9.1f} MB")
        service.login()
        print(f"{'GET / first load after start':<52} {service.get('/') * 1000:9.2f} ms")
        transcript = f"/wakes/c001/{long_wake}"
        print(f"{f'GET {transcript} first load':<52} {service.get(transcript) * 1000:9.2f} ms")
        pages = ["/", "/wakes/c000", transcript, "/decisions", "/money"]
        for i in range(LOADS):
            service.get(pages[i % len(pages)])
        print(f"{f'citizen web: RSS after {LOADS} page loads':<52} {service.rss_mb():9.1f} MB")
        show(f"GET / ({opts.citizens} citizens, {opts.citizens * opts.wakes} wakes)",
             service.timed("/", opts.runs), "ms", 1000)
        show(f"GET {transcript} ({opts.iterations} iterations)",
             service.timed(transcript, opts.runs), "ms", 1000)
        show(f"GET /wakes/c000 ({opts.wakes} wakes)", service.timed("/wakes/c000", opts.runs),
             "ms", 1000)
        show(f"GET /wakes/c000?status=ok ({opts.wakes} wakes)",
             service.timed("/wakes/c000?status=ok", opts.runs), "ms", 1000)
        started = time.perf_counter()
        for n in range(opts.wakes + 1, opts.deep + 1):
            write_wake("c000", n, 3)
        print(f"c000 now has {opts.deep} wakes (written in {time.perf_counter() - started:.0f} s)")
        show(f"GET /wakes/c000 ({opts.deep} wakes)", service.timed("/wakes/c000", opts.runs),
             "ms", 1000)
        last = (opts.deep + 49) // 50
        show(f"GET /wakes/c000?page={last} ({opts.deep} wakes)",
             service.timed(f"/wakes/c000?page={last}", opts.runs), "ms", 1000)
        show(f"GET /wakes/c000?status=ok ({opts.deep} wakes)",
             service.timed("/wakes/c000?status=ok", opts.runs), "ms", 1000)
        show(f"GET / (c000 with {opts.deep} wakes)", service.timed("/", opts.runs), "ms", 1000)
        print(f"{'citizen web: RSS at the end':<52} {service.rss_mb():9.1f} MB")
    finally:
        if service is not None:
            service.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
