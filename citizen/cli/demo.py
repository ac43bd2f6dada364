"""`citizen demo`: three citizens, three daemons, real wakes - on the embedded model, or on
Claude through the broker when the operator gives a key."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import click

from citizen import civilization, config
from citizen.admin import founding
from citizen.cli.terminal import command
from citizen.config import paths
from citizen.home import wakelog
from citizen.home.memory import Memory
from citizen.home.state import load as load_state
from citizen.home.tasks import TaskQueue
from citizen.llm.model_file import ensure_model
from citizen.tools import evidence
from citizen.wake.types import Setup
from citizen.wake.types.review import ReviewWake

CITIZENS = ("opus", "mira", "aria")
TASKS = {
    "opus": "Write a file notes/plan.md with three short steps for organising a shared library.",
    "mira": "Run the shell command `ls -la` in your home and write what you see to notes/home.md.",
    "aria": "Write a short poem about persistence to notes/poem.md.",
}
# Then the self-evolution the project exists for: opus changes its code and announces
# it; nobody is told to review. The announcement rings mira's and aria's doorbells for a
# REVIEW wake (test and report), the report that verifies it rings them to adopt, and 2/3
# holding it merges it into the baseline (the summary says how far it got).
EVOLVE = ("Improve your own code: append the line 'Evolved in the demo.' to code/README.md, "
          "commit it with `git -C code commit -am 'demo change'`, then announce it with "
          "code_announce.")
AUTHOR = "opus"
EVOLVED = "Evolved in the demo."
# What the reviewers' "test it" runs in the demo (the operator's evolution.test_command):
# two quick files of the suite (≈5 s) - the whole suite takes 15+ minutes per review on 2
# cores, and tests/test_imports.py alone (an interpreter per module) took most of a minute.
QUICK_TESTS = (f"{shlex.quote(sys.executable)} -m pytest -q -x -p no:cacheprovider "
               "tests/test_config.py tests/test_pure_rules.py")
# Small per-wake limits: the embedded model writes ≈12 tokens/s under a grammar. On
# Claude a wake may take the few more steps a commit and an announcement need.
DEMO_BUDGET = {"max_usd_per_wake": 1.0, "max_iterations": 3, "max_output_tokens": 192}
CLAUDE_BUDGET = {"max_usd_per_wake": 1.0, "max_iterations": 8, "max_output_tokens": 2048}
# What the embedded model is, said before the demo starts rather than after it disappoints.
LOCAL_HONESTY = (
    "the embedded model is Gemma 3 270M on this CPU: it routes wakes, calls tools under a "
    "grammar and answers the REVIEW wake's structured questions, but it rarely carries a "
    "task of several steps (commit, then announce) and its judgement of a review means "
    "little. When opus's model does not announce, the demo makes the change itself and "
    "says so; the test runs, reports and adoptions that follow are the citizens' own "
    "wakes. Give the demo ANTHROPIC_API_KEY and the same flow runs on Claude through the "
    "broker.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_model_server(log_dir: Path) -> tuple[subprocess.Popen[bytes] | None, str]:
    """One shared llama.cpp server for all daemons, when its extra is installed."""
    try:
        import llama_cpp.server  # noqa: F401, PLC0415
    except ImportError:
        return None, ""
    port = _free_port()
    out = (log_dir / "model-server.log").open("wb")  # door: the demo's own civilization
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(ensure_model()),
         "--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", "8192", "--n_threads", str(os.cpu_count() or 1)],
        stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=1).close()  # noqa: S310
            return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.3)
    proc.kill()
    return None, ""


@click.command()
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="Civilization root (default: a new temporary directory).")
@click.option("--wakes", type=int, default=3, show_default=True,
              help="Wakes opus has to announce its change before the demo makes it.")
@click.option("--interval", type=float, default=600.0, show_default=True,
              help="Seconds between scheduled wakes (REFLECT, LIBRARY, ...). The default "
              "keeps them after the story: on the embedded model's one serial server "
              "each slot's wake would hold a reviewer's for a minute.")
@click.option("--provider", type=click.Choice(["auto", "local", "anthropic"]), default="auto",
              show_default=True, help="auto: Claude through the broker when ANTHROPIC_API_KEY "
              "is set (it spends API money, at most $1 a wake), else the embedded model.")
def demo(root: str | None, wakes: int, interval: float, provider: str) -> None:
    """Run opus, mira and aria as daemons for a few wakes: a task each, then opus's code
    change announced, reviewed by its peers' own wakes, adopted and merged.

    Each gets a small task by the doorbell: opus's change first, the peers' once opus's
    wake has begun. Scheduled wakes come every --interval seconds (by default after the
    story). The daemons stop once the change is merged or closed and no review waits;
    then a summary says what each produced and where the logs are.
    """
    if provider == "auto":
        provider = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "local"
    base = Path(root or tempfile.mkdtemp(prefix="experience-demo-"))
    os.environ["CIV_ROOT"] = str(base)
    # Every daemon, wake and the dev-mode broker follow this: the embedded model never
    # spends API money; Claude's calls go through the broker, which holds the key.
    os.environ["EXPERIENCE_PROVIDER"] = provider
    # The operator's directory of this civilization (/etc/experience on a server).
    os.environ["EXPERIENCE_OPERATOR_DIR"] = str(base / "etc-experience")
    _found(base, CLAUDE_BUDGET if provider == "anthropic" else DEMO_BUDGET)
    server, url = None, ""
    if provider == "anthropic":
        click.echo("on Claude through the dev-mode broker (ANTHROPIC_API_KEY; at most $1 a wake)")
    else:
        click.echo(LOCAL_HONESTY)
        server, url = _start_model_server(base)
    if url:
        os.environ["EXPERIENCE_LOCAL_URL"] = url
        click.echo(f"one shared model server for all daemons: {url}")
    elif provider == "local":
        click.echo("each wake loads the embedded model in-process")
    # Opus's change comes first in its queue: the story (announce, review, adopt, merge)
    # starts with its first wake; its small task waits for a later TASK wake.
    firsts = _give_tasks()
    evolve = firsts[AUTHOR]
    civilization.commons().ring(AUTHOR, "TASK", f"task {evolve}", sender="demo")
    daemons = {}
    for name in CITIZENS:
        out = (base / f"daemon-{name}.log").open("wb")  # door: the demo's own civilization
        code = paths.home(name).code  # each daemon runs its own code, as on a server
        # Every daemon runs until the story is told (see `_watch`): the reviewers' REVIEW
        # wakes come when opus announces, however many wakes that takes.
        daemons[name] = subprocess.Popen(
            [sys.executable, "-m", "citizen", "run", name, "--interval", str(interval),
             "--wake-timeout", "600", "--first-wake", str(interval)],
            stdout=out, stderr=subprocess.STDOUT, cwd=code,
            env={**os.environ, "PYTHONPATH": str(code)})
    seen: set[Path] = set()
    try:
        # The peers' tasks are rung once opus's wake holds its permit: the story starts
        # with opus's change, not behind two small tasks (a working wake each at most).
        _await_first_wake(AUTHOR, daemons[AUTHOR])
        for name in CITIZENS[1:]:
            civilization.commons().ring(name, "TASK", f"task {firsts[name]}", sender="demo")
        _watch(base, daemons, seen, evolve, (wakes, interval))
    finally:
        for d in daemons.values():
            if d.poll() is None:
                d.send_signal(signal.SIGTERM)
        for d in daemons.values():
            d.wait(timeout=120)
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    _print_new(seen)
    _summary(base)


def _found(base: Path, budget: dict[str, float]) -> None:
    """The civilization's tree, each ~/code, small budgets, and the operator's rules."""
    founding.init(list(CITIZENS))
    founding.init_code(list(CITIZENS))  # the baseline and each ~/code, as on a server
    paths.operator_dir().mkdir(exist_ok=True)
    for name in CITIZENS:
        cfg_path = paths.home(name).config
        data = json.loads(cfg_path.read_text())  # door: the demo's own civilization
        data["budget"] = budget
        cfg_path.write_text(json.dumps(data, indent=2))  # door: the demo's own civilization
        # door: the demo's own civilization, made by this process
        paths.operator_rules_file(name).write_text(json.dumps(
            {"evolution": {"test_command": QUICK_TESTS}}, indent=2))
    click.echo(f"civilization: {base}")
    click.echo(f"the operator's evolution.test_command (what a review's \"test it\" runs), "
               f"in {paths.operator_dir()}/<name>.json: {QUICK_TESTS}")


def _give_tasks() -> dict[str, str]:
    """Each citizen's task queued; the first each will take, by name (opus's change)."""
    evolve = TaskQueue(paths.home(AUTHOR).tasks).add(EVOLVE, source="demo").id
    click.echo(f"task for {AUTHOR}: {EVOLVE}")
    firsts = {}
    for name in CITIZENS:
        task = TaskQueue(paths.home(name).tasks).add(TASKS[name], source="demo")
        firsts[name] = evolve if name == AUTHOR else task.id
        click.echo(f"{'then ' if name == AUTHOR else ''}task for {name}: {TASKS[name]}")
    return firsts


def _await_first_wake(name: str, daemon: subprocess.Popen[bytes], wait_s: float = 120) -> None:
    """Until `name`'s first wake has begun (its log exists), its daemon died, or a while."""
    deadline = time.monotonic() + wait_s
    while (not wakelog.wake_logs(paths.home(name)) and daemon.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.2)


def _watch(base: Path, daemons: dict[str, subprocess.Popen[bytes]], seen: set[Path],
           evolve: str, pace: tuple[int, float]) -> None:
    """Print wakes as they end. If opus's model has not announced once it had its go at
    the change task (or after WAKES wakes), the demo makes the change. Done once a change
    is announced and no REVIEW wake would open."""
    wakes, interval = pace
    deadline = time.monotonic() + (wakes + 4) * (interval + 600) + 60  # +4: REVIEW wakes
    stepped_in = False
    queue, home = TaskQueue(paths.home(AUTHOR).tasks), paths.home(AUTHOR)
    while any(d.poll() is None for d in daemons.values()) and time.monotonic() < deadline:
        time.sleep(1)
        _print_new(seen)
        logs = wakelog.wake_logs(home)  # only the newest can be running: read it alone
        running = bool(logs) and wakelog.summary(logs[-1])["status"] == "running"
        ended = len(logs) - running
        # Read before the changes: a wake that announced and then ended is seen so.
        tried = not running and _tried(queue, evolve)
        announced = bool(civilization.commons().evolution.changes())
        if not announced and not stepped_in and (tried or ended >= wakes):
            stepped_in = True
            _make_the_change(base)
            continue
        if announced and (stepped_in or tried) and not any(map(owes_review, CITIZENS)):
            return  # the story is told: the daemons are stopped (SIGTERM) after


def _tried(queue: TaskQueue, task_id: str) -> bool:
    """Opus's model has had its go at the task: finished, or claimed at least once (a
    task a wake did not finish stays claimed for the next; the caller checks that no
    wake runs)."""
    if task_id in queue.ids("done") or task_id in queue.ids("failed"):
        return True
    return any(task_id in queue.ids(state) and queue.load(state, task_id).attempts >= 1
               for state in ("queue", "active"))


def _make_the_change(base: Path) -> None:
    """Opus's change, made as opus would when its model did not: the line appended to its
    ~/code/README.md, committed under its name, announced by the tool's own command - so
    the announcement rings the reviewers' doorbells as the model's would have."""
    click.echo(f"\nthe embedded model did not announce; the demo made {AUTHOR}'s change "
               f"(append '{EVOLVED}' to its code/README.md, commit, code_announce). The "
               "review, adoption and merge that follow are the citizens' own REVIEW wakes, "
               "no task queued.")
    code = paths.home(AUTHOR).code
    readme = code / "README.md"
    # door: the demo's own civilization, made by this process
    if not readme.is_file() or EVOLVED not in readme.read_text(encoding="utf-8"):
        with readme.open("a", encoding="utf-8") as out:  # door: the demo's own civilization
            out.write(f"\n{EVOLVED}\n")
    git = ["git", "-C", str(code)]
    steps = [[*git, "add", "README.md"], [*git, "commit", "-qm", "demo change"]]  # as opus
    # The operator's command, from the demo's own code (not opus's), as `citizen tool` is.
    # -P: the civilization's root is the working directory, and its `shared/` (the commons,
    # which citizens write) must never be imported as the `shared` package.
    steps += [[sys.executable, "-P", "-m", "citizen", "tool", AUTHOR, "code_announce", json.dumps({
        "description": f"README.md ends with '{EVOLVED}'",
        "expected_outcome": "the README says it evolved; the tests still pass"})]]
    for argv in steps:
        done = subprocess.run(argv, cwd=base, capture_output=True, text=True,
                              check=False, timeout=120)
        if done.returncode != 0 and "nothing to commit" not in done.stdout:
            click.echo(f"  {' '.join(argv[:5])[:80]} failed: "
                       f"{(done.stderr or done.stdout).strip()[:300]}")
            return
    click.echo(f"  announced: {civilization.commons().evolution.changes()[-1].id}\n")


def owes_review(name: str) -> bool:
    """Whether a REVIEW wake of `name` would open now: its own gate, from files alone."""
    home = paths.home(name)
    setup = Setup(home, config.load_citizen(name), config.templates(), TaskQueue(home.tasks),
                  Memory(home.memory), 0, load_state(home)["marks"])
    return ReviewWake().gate(setup).work


def _print_new(seen: set[Path]) -> None:
    for name in CITIZENS:
        for path in wakelog.wake_logs(paths.home(name)):
            if path in seen:
                continue
            row = wakelog.summary(path)
            if row["status"] == "running":
                continue
            seen.add(path)
            click.echo(f"  {name:<5} wake {row['wake']:>2} {row['type']:<12} {row['status']:<10}"
                       f" {row['calls']:>2} calls {row['duration_s']:6.1f} s  "
                       f"{(row['why'] or '')[:70]}")


def _produced(home: Path, queue: TaskQueue) -> None:
    """What the citizen actually produced for each task - checked here, not taken from
    its report - or why it did not."""
    for state in ("done", "failed", "active", "queue"):
        for task_id in queue.ids(state):
            task = queue.load(state, task_id)
            wanted = (task.meta.get("deliverables") or evidence.deliverables(task.text))["files"]
            problems, proof, _ = evidence.check(home, {"files": wanted}, [])
            click.echo(f"        {task_id} {state}: " + (
                "; ".join([*proof, *problems]) or "names no file to check"))
            if state == "failed" and task.result:
                click.echo(f"          why: {task.result[:200]}")


def _evolution() -> None:
    """How far the demo's code change got - or why it did not start."""
    evolution = civilization.commons().evolution
    changes = evolution.changes()
    click.echo("\ncode evolution")
    if not changes:
        queue = TaskQueue(paths.home(AUTHOR).tasks)
        state = next((s for s in ("done", "failed", "active", "queue")
                      for t in queue.ids(s) if "code_announce" in queue.load(s, t).text), "?")
        click.echo(f"  no change was announced: opus's task to change its code is {state}. "
                   "The embedded 270M model rarely carries a commit and a code_announce "
                   "through; with a capable model (ANTHROPIC_API_KEY) three daemons take a "
                   "change from announce to merge (tests/test_evolution_daemons.py).")
        return
    for name in CITIZENS:  # no task asked for these: the announcement's doorbell did
        rows = [wakelog.summary(p) for p in wakelog.wake_logs(paths.home(name))]
        worked = [r for r in rows if r["type"] == "REVIEW" and r["status"] != "idle"]
        if worked:
            click.echo(f"  {name} reviewed in {len(worked)} REVIEW wakes: "
                       + "; ".join(str(r["why"] or r["status"])[:60] for r in worked))
    rates = {x["id"]: x["adoption_rate"] for x in evolution.status()["changes"]}
    for c in changes:
        click.echo(f"  {c.id} by {c.citizen}: {c.status}; reports "
                   f"{ {k: r['outcome'] for k, r in c.reports.items()} }; held by {rates[c.id]}"
                   + (f"; merged into the baseline as {str(c.merged['baseline_commit'])[:12]}"
                      if c.merged else ""))


def _summary(base: Path) -> None:
    click.echo("\nsummary")
    for name in CITIZENS:
        home = paths.home(name)
        rows = [wakelog.summary(p) for p in wakelog.wake_logs(home)]
        tokens = sum(e.get("tokens_in", 0) + e.get("tokens_out", 0)
                     for p in wakelog.wake_logs(home) for e in wakelog.read(p)
                     if e.get("event") == "wake_end")
        counts = TaskQueue(home.tasks).counts()
        statuses: dict[str, int] = {}
        for r in rows:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        click.echo(f"  {name:<5} {len(rows)} wakes {statuses}  tasks done {counts['done']} "
                   f"failed {counts['failed']} queued {counts['queue'] + counts['active']}  "
                   f"{tokens} tokens")
        _produced(home.dir, TaskQueue(home.tasks))
    _evolution()
    click.echo(f"\nlogs: {base}/<citizen>/logs/wakes/   daemon output: {base}/daemon-*.log")
    click.echo(f"read them with: {command('logs opus')}   "  # CIV_ROOT is base: --root in it
               f"(one wake: {command('logs opus --wake 1')})")
