"""Evolution among N citizens (issue 43): what one change costs, then ten at once.

    .venv/bin/python bench/evolution.py [--n 10 100 1000] [--changes 10] [--window 60]
                                        [--idle 60] [--timeout 1500] [--until decided]
                                        [--scheduler | --daemons] [--parallel P]

For each N, two scenarios, each in a freshly founded dev-mode civilization: **one** change
(c0000's), then a **burst** of `--changes` changes from as many authors (c0000 …),
announced evenly over `--window` s (default: ten within 60 s; the issue says within an
hour - a minute is the harder case). Every citizen's `~/code` is a clone of a
tiny baseline (`app.py`, `tests/test_app.py`), and the operator's `evolution.test_command`
is a quick pytest of that one file (`TEST_COMMAND`): the demo's QUICK_TESTS
(citizen/cli/demo.py) are files of this project, which a baseline of a thousand clones
does not hold. An author commits a file of its own and announces it at once
(`code_announce`, run as the author by a helper process, as `citizen tool` runs it).
The model is the stand-in Messages API (tests/anthropic_server.py) answering what a
REVIEW wake asks (tests/daemons.py:routing: "worked" when the test run passed, adopt),
with usage counted from the request's size and no prompt cache (so $ is an upper bound,
at the price of the model asked, templates/models.json).

- N ≤ 100 (`--daemons`): `citizen run NAME --interval 86400 --first-wake 86400`, one
  process each: only rings wake them.
- N > 100 (`--scheduler`): `citizen run --all --scheduler` - the server's one scheduler
  rehearsed in dev mode (gates in the scheduler, each wake with work `citizen run NAME
  --request FILE`, at most `--parallel` at once, default the CPUs), the closest to a
  server of a thousand (`citizen run --all` alone hosts the daemons but writes homes).

All runs inside a user and PID namespace of their own (`unshare -Urpf`, as
bench/daemons.py): the namespace's inotify limit is 64, so a hundred daemons leave the
neighbours' half of the user's 128 (the rest poll their doorbell once a second), and
whatever a scenario started ends with it.

Per change, from the records: the test runs (`changes/<id>/runs`), the most at once (the
wake logs' `code_test` calls: when each returned and how long it took), the model calls
that name it (the stand-in's log: a batched adoption question counts for each change it
names) and their $, announce → verified (the second counted "worked" report's "ts") →
merged (the merged record's "ts"; the records' stamps are whole seconds), the citizens
that adopted it, the drawn reviewers that ran no test because their wake began after
two reports had verified the change (a bound on working wakes - the broker's wake
permits, the CPUs by default, or the scheduler's `--parallel` - held them back). Then
the calls of citizens that neither reviewed, adopted nor declined, the calls about a
change before its verification by citizens not drawn for it (the herd's cost: 0), and
`--idle` seconds of the founded civilization with nothing announced (0 calls).
`--until verified` stops a scenario once every change is verified, `--until merged` once
every one is merged (what was reached is shown); by default (`decided`) it runs until
every citizen has adopted or declined each change, so every call a change costs is
counted. Stop it with Ctrl-C (or SIGTERM to the inner process, the namespace's first).
Nothing here asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.evolution_report import goals, ledger, measure, report, wakes  # noqa: E402

APP = "def greet():\n    return 'hi'\n"
TEST = "from app import greet\n\n\ndef test_greet():\n    assert greet().startswith('h')\n"
TEST_COMMAND = f"{shlex.quote(sys.executable)} -m pytest -q -x -p no:cacheprovider tests"
K = 3  # evolution.reviewers: the operator's default, left unset here
CHANGE = re.compile(r"\bc\d{4}-[0-9a-f]{10}\b")
ME = re.compile(r"You are (\w+),")


# ------------------------------------------------------------ the civilization


def prepare(top: Path, n: int) -> tuple[Path, list[str]]:
    """Found N citizens, a baseline with a release, a clone each, the operator's rules."""
    from bench.daemons import found

    civ, rules = top / "civ", top / "etc-experience"
    civ.mkdir()
    rules.mkdir()
    os.environ.update(CIV_ROOT=str(civ), EXPERIENCE_OPERATOR_DIR=str(rules))
    names = found(n)
    base = civ / "shared" / "baseline"
    git = ["git", "-c", "user.name=setup", "-c", "user.email=setup@x"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(base)], check=True)
    (base / "tests").mkdir()
    (base / "app.py").write_text(APP)
    (base / "tests" / "test_app.py").write_text(TEST)
    subprocess.run([*git, "-C", str(base), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(base), "commit", "-qm", "baseline"], check=True)
    subprocess.run([*git, "-C", str(base), "update-ref", "refs/heads/release", "HEAD"],
                   check=True)

    def clone(name: str) -> None:
        code = civ / name / "code"
        code.rmdir()
        subprocess.run(["git", "clone", "-q", "-c", f"user.name={name}", "-c",
                        f"user.email={name}@x", str(base), str(code)], check=True)
        (rules / f"{name}.json").write_text(json.dumps(
            {"evolution": {"test_command": TEST_COMMAND}}))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(clone, names))
    return civ, names


class StandIn:
    """The stand-in Messages API, answering a REVIEW wake's questions; each request
    logged: when, whose (the system prompt's name), for what, which changes it names."""

    def __init__(self) -> None:
        from tests.anthropic_server import MessagesServer

        self.server = MessagesServer()
        self.server.responder = self.answer
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        prices = json.loads((ROOT / "templates" / "models.json").read_text())
        self.prices: dict[str, dict[str, float]] = prices["prices_usd_per_mtok"]

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        from citizen.llm.base import estimate_tokens
        from tests.anthropic_server import text, tool_use
        from tests.daemons import routing

        asked = purpose(body)
        if asked == "review_adopt_batch":  # one question for several changes (routing's
            props = body["tools"][-1]["input_schema"]["properties"]  # one is singular)
            reply = tool_use("respond", {cid: {"decision": "adopt", "reason": "it serves me"}
                                         for cid in props})
        else:
            reply = routing(body, lambda _t: False) or text("nothing else to do")
        tokens_in = estimate_tokens(json.dumps(body))
        tokens_out = max(1, estimate_tokens(json.dumps(reply["content"])))
        reply["usage"].update(input_tokens=tokens_in, output_tokens=tokens_out)
        reply["model"] = body.get("model", reply["model"])
        price = self.prices.get(str(body.get("model")), {"input": 0.0, "output": 0.0})
        system = " ".join(b.get("text", "") for b in body.get("system") or [])
        who = ME.search(system)
        first = json.dumps(body["messages"][0]["content"])
        with self.lock:
            self.log.append({"t": time.time(), "who": who[1] if who else "?",
                             "model": str(body.get("model")),
                             "purpose": asked.removesuffix("_batch"),
                             "batch": asked.endswith("_batch"),
                             "changes": set(CHANGE.findall(first)),
                             "usd": (tokens_in * price["input"]
                                     + tokens_out * price["output"]) / 1e6})
        return reply

    def since(self, t: float) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.log if r["t"] >= t]


def purpose(body: dict[str, Any]) -> str:
    """What a request asks, from its forced schema (the wire carries no purpose)."""
    if (body.get("tool_choice") or {}).get("name") != "respond":
        return "execute"
    props = body["tools"][-1]["input_schema"]["properties"]
    if "outcome" in props:
        return "review_outcome"
    if "decision" in props:
        return "review_adopt"
    if props and all(CHANGE.fullmatch(p) for p in props):
        return "review_adopt_batch"
    return next((p for f, p in (("tier", "route"), ("tools", "select_tools"),
                                ("verdict", "verify_task")) if f in props), "structured")


def start(names: list[str], env: dict[str, str], scheduler: bool,
          parallel: int | None, out: Path) -> list[subprocess.Popen[bytes]]:
    """The citizens' daemons, or the one scheduler hosting them; returns once all are up."""
    civ = Path(env["CIV_ROOT"])
    every = ["--interval", "86400", "--first-wake", "86400"]
    procs = []
    if scheduler:
        from tests.daemons import have_run

        have_run(tuple(names))  # the scheduler gates a citizen itself once it has run
        with (out / "scheduler.out").open("wb") as fh:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "citizen", "run", "--all", "--scheduler", *every,
                 *(["--parallel", str(parallel)] if parallel else [])],
                env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))
        status = civ / ".scheduler" / "state" / "status.json"

        def up() -> bool:
            try:
                hosted = json.loads(status.read_text())["citizens"]
            except (OSError, ValueError, KeyError):
                return False
            return len(hosted) >= len(names)
    else:
        for name in names:
            with (out / f"{name}.out").open("wb") as fh:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "citizen", "run", name, *every], env=env,
                    stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))
        beats = civ / "shared" / "monitor" / "heartbeats"

        def up() -> bool:
            return all((beats / f"{n}.json").exists() for n in names)
    until(lambda: up() or any(p.poll() is not None for p in procs), 900)
    return procs


def until(done: Callable[[], object], limit_s: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(every)
    return False


def stop(procs: list[subprocess.Popen[bytes]], civ: Path) -> None:
    """Daemon manners: a SIGTERM lets the wake finish, a second stops it now."""
    for sig in (signal.SIGTERM, signal.SIGTERM):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
        time.sleep(1)
    until(lambda: all(p.poll() is not None for p in procs), 60)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    with contextlib.suppress(OSError, ValueError):  # no broker was started, or it has gone
        os.kill(int((civ / ".broker" / "broker.pid").read_text()), signal.SIGTERM)


def announcer(args: argparse.Namespace) -> None:
    """`--announce AT NAME...`: at AT + i * gap (epoch s), NAME commits a file of its own
    and announces it (code_announce as in a wake). Imported first, so a commit and its
    announcement are ms apart: an adoption landing between them would announce the
    cherry-pick instead (printed as `raced`)."""
    from citizen.tools import core_tools
    from tests.scripts import tool_env

    announce = core_tools(code=True)["code_announce"]
    for i, name in enumerate(args.names):
        time.sleep(max(0.0, args.at + i * args.gap - time.time()))
        code = Path(os.environ["CIV_ROOT"]) / name / "code"
        (code / f"{name}.md").write_text(f"{name}'s note\n")
        for _ in range(50):  # an adoption's cherry-pick may hold the index a moment
            done = subprocess.run(["git", "-C", str(code), "add", f"{name}.md"],
                                  capture_output=True, check=False).returncode == 0
            if done and subprocess.run(["git", "-C", str(code), "commit", "-qm",
                                        f"{name}'s note"], capture_output=True,
                                       check=False).returncode == 0:
                break
            time.sleep(0.1)
        head = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        t = time.time()
        answer = json.loads(announce.run(tool_env(name), {
            "description": f"{name}'s note", "expected_outcome": "the tests still pass"}))
        print(json.dumps({"id": answer["id"], "t": t, "author": name,
                          "raced": not head.startswith(answer["commit"])}), flush=True)


# ------------------------------------------------------------ one scenario


def scenario(args: argparse.Namespace, n: int, label: str, authors: list[str], *,
             api: StandIn, idle_s: float) -> dict[str, Any]:
    from tests.anthropic_server import API_KEY

    top = Path(tempfile.mkdtemp(prefix=f"bench-evolution-{n}-{label.split(maxsplit=1)[0]}-"))
    t = time.monotonic()
    civ, names = prepare(top, n)
    made_s = time.monotonic() - t
    env = {**os.environ, "ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": api.server.url,
           "PYTHONPATH": str(ROOT)}
    scheduler = args.scheduler or (not args.daemons and n > 100)
    t = time.monotonic()
    procs = start(names, env, scheduler, args.parallel, top)
    out: dict[str, Any] = {"n": n, "label": label, "made_s": made_s,
                           "up_s": time.monotonic() - t, "scheduler": scheduler,
                           "alive": sum(p.poll() is None for p in procs), "procs": len(procs)}
    try:
        t0 = time.time()
        if idle_s:
            time.sleep(idle_s)  # a stretch of nothing: what does it cost?
            out["idle"] = (idle_s, api.since(t0), ledger(civ))
        at = time.time() + 3 + 0.5 * len(authors)  # the helper has imported by then
        gap = args.window / max(1, len(authors) - 1) if len(authors) > 1 else 0.0
        helper = subprocess.Popen(
            [sys.executable, __file__, "--announce", str(at), str(gap), *authors],
            env=env, stdout=subprocess.PIPE, text=True)
        assert helper.stdout is not None
        said = [json.loads(line) for line in helper.stdout]
        helper.wait()
        t_start = min((a["t"] for a in said), default=time.time())
        ids = [a["id"] for a in said]
        out["announced"], out["t_start"] = said, t_start
        done: set[str] = set()
        out["finished"] = until(lambda: settled(civ, names, ids, args.until, done),
                                args.timeout, 2.0 if n > 100 else 0.5)
        out["wall_s"] = time.time() - t_start
    finally:
        stop(procs, civ)
    out["calls"] = api.since(out.get("t_start", time.time()))
    out["ledger"] = ledger(civ)
    out["wakes"] = wakes(civ, names)
    out["changes"] = [measure(civ, names, a["id"], out["calls"], out["wakes"])
                      for a in out.get("announced", [])]
    if not args.keep:
        shutil.rmtree(top, ignore_errors=True)
    return out


def settled(civ: Path, names: list[str], ids: list[str], target: str,
            done: set[str]) -> bool:
    """Every change verified (`--until verified`), merged (`merged`), or merged and
    decided by everyone (`decided`: every call it costs is counted). `done`: the changes
    found so already (one is not read again: at a thousand its adoptions are a thousand
    files, and this look competes for the CPUs)."""
    from shared.evolution import Evolution

    evolution = Evolution(civ / "shared", names, False)
    for cid in set(ids) - done:
        folder = civ / "shared" / "changes" / cid
        if target == "verified":
            if evolution.get(cid).status in ("verified_good", "merged"):
                done.add(cid)
        elif (civ / "shared" / "merged" / f"{cid}.json").exists():
            decided = sum(1 for kind in ("adoptions", "declines")
                          for _ in (folder / kind).glob("*.json"))
            if target == "merged" or decided >= len(names) - 1:
                done.add(cid)
    return done >= set(ids)


def inner(args: argparse.Namespace) -> None:
    # The namespace's first process ignores a signal it has no handler for: SIGTERM ends
    # it through `finally`, which stops what it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    Path("/proc/sys/user/max_inotify_instances").write_text(str(args.inotify_limit))
    api = StandIn()
    api.server.start()
    results = []
    try:
        for n in args.n:
            for label, authors, idle_s in (
                    ("one change", ["c0000"], args.idle),
                    (f"{args.changes} changes", [f"c{i:04d}" for i in range(args.changes)],
                     0.0 if args.only != "burst" else args.idle)):
                if args.only and (args.only == "one") != (label == "one change"):
                    continue
                r = scenario(args, n, label, authors, api=api, idle_s=idle_s)
                r["until"], r["parallel"] = args.until, args.parallel or os.cpu_count()
                report(r)
                results.append(r)
                sys.stdout.flush()
        goals(results)
    finally:
        api.server.stop()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--announce":
        announcer(argparse.Namespace(at=float(sys.argv[2]), gap=float(sys.argv[3]),
                                     names=sys.argv[4:]))
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[10])
    parser.add_argument("--changes", type=int, default=10, help="the burst's changes")
    parser.add_argument("--window", type=float, default=60.0,
                        help="seconds over which the burst is announced")
    parser.add_argument("--idle", type=float, default=60.0,
                        help="seconds with nothing announced, before the first change")
    parser.add_argument("--timeout", type=float, default=1500.0, help="per scenario")
    parser.add_argument("--until", choices=("decided", "merged", "verified"), default="decided",
                        help="verified; merged; decided: merged, and every citizen adopted "
                             "or declined (default)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--scheduler", action="store_true", help="the scheduler for any N")
    mode.add_argument("--daemons", action="store_true", help="a daemon each for any N")
    parser.add_argument("--parallel", type=int, default=None,
                        help="the scheduler's wakes at once (default: the CPUs)")
    parser.add_argument("--only", choices=("one", "burst"), default=None,
                        help="one scenario only (default: both)")
    parser.add_argument("--keep", action="store_true", help="keep each civilization's tree")
    parser.add_argument("--inotify-limit", type=int, default=64)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args)
        return
    if min(args.n) < max(args.changes, K + 1):
        parser.error(f"--n must be at least --changes ({args.changes}, an author each) and "
                     f"k + 1 ({K + 1})")
    subprocess.run(["unshare", "-Urpf", "--mount-proc", sys.executable, __file__, "--inner",
                    *sys.argv[1:]], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


if __name__ == "__main__":
    main()
