"""The server's one scheduler, rehearsed in dev mode (`citizen run --all --scheduler`):
every citizen's schedule in one process that writes nothing in a home - slots counted and
idle wakes logged in its own store, rings read where they lie and handed to the wake,
each wake with work its own one-shot (`citizen run NAME --request FILE`, what
`citizen-wake@NAME` runs). The booted test with real users is
tests/test_scheduler_server.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from citizen.admin.schedstore import Store
from citizen.config import paths
from citizen.daemon import scheduled, status, unit
from citizen.daemon.process import WakeRequest
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from shared import doorbell
from tests.anthropic_server import MessagesServer, no_deliverables, tool_use
from tests.daemons import Daemon, cli, daemon_env, heartbeat, start, wait_for, worker

NAMES = ("aria", "mira", "opus")
IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes them
EVERY = ("--interval", "0.5", "--first-wake", "0")


def scheduler(env: dict[str, str], *args: str) -> Daemon:
    return start(env, "--all", "--scheduler", *args)


@pytest.fixture
def civ(civ: Path) -> Path:
    """The three, having run before: each has its heartbeat (a citizen that never woke
    has its first wake in its unit, to write one - test_a_first_wake_...)."""
    for name in NAMES:
        status.beat(paths.home(name), name=name, state=status.State.STOPPED, current="",
                    next_at=None, wakes_run=0)
    return civ


def stop(proc: Daemon) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    return out


def idle(name: str) -> list[dict[str, Any]]:
    path = Store().idle_log(name)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def logs(name: str) -> list[list[dict[str, Any]]]:
    return [wakelog.read(p) for p in wakelog.wake_logs(paths.home(name))]


def files(civ: Path) -> dict[str, tuple[int, int]]:
    """Every file of every home: its size and time (what a write would change)."""
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for n in NAMES
            for p in (civ / n).rglob("*") if ".git" not in p.parts}


def test_idle_wakes_are_the_schedulers_own_and_no_home_is_written(
        civ: Path, messages_api: MessagesServer) -> None:
    before = files(civ)
    proc = scheduler(daemon_env(civ, messages_api), *EVERY)
    try:
        wait_for(lambda: all(len(idle(n)) >= 4 for n in NAMES), timeout=60)
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert files(civ) == before  # not a file made, changed or touched in a home
    for name in NAMES:
        records = idle(name)
        assert all(r["status"] in ("idle", "skipped") for r in records), records
        # The slots, counted in the scheduler's store, in order: none skipped or twice.
        assert [r["slot"] for r in records] == list(range(len(records))), name
        assert logs(name) == []
    assert not messages_api.requests  # idle wakes: no model, no process


def test_a_ring_starts_its_citizens_wake_which_takes_the_ring(
        civ: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = worker
    env = daemon_env(civ, messages_api)
    proc = scheduler(env, *IDLE)
    try:
        wait_for(lambda: "3 citizens in one process" in proc.output())
        cli(env, "task", "add", "mira", "Write notes/out.md")
        wait_for(lambda: TaskQueue(paths.home("mira").tasks).ids("done"), timeout=90)
        wait_for(lambda: heartbeat(civ, "mira").get("state") == "scheduled")
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert (civ / "mira" / "notes" / "out.md").read_text() == "from the daemon"
    (wake,) = logs("mira")
    assert wake[0]["reason"].startswith("doorbell: task") and wake[-1]["status"] == "ok"
    assert wake[0]["pid"] != proc.pid  # the wake is its own process, not the scheduler
    assert not any(paths.home("mira").doorbell.iterdir())  # the wake removed its ring
    assert logs("opus") == [] and logs("aria") == []


def test_kill_9_of_the_scheduler_hands_no_slot_out_twice(
        civ: Path, messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    first = scheduler(env, *EVERY)
    wait_for(lambda: all(len(idle(n)) >= 2 for n in NAMES), timeout=60)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    counted = {n: len(idle(n)) for n in NAMES}
    second = scheduler(env, *EVERY)
    try:
        wait_for(lambda: all(len(idle(n)) >= counted[n] + 2 for n in NAMES), timeout=60)
    finally:
        out = stop(second)
    assert second.returncode == 0, out
    for name in NAMES:
        slots = [r["slot"] for r in idle(name)]
        assert slots == list(range(len(slots))), (name, slots)


def test_a_citizen_whose_daemon_runs_is_left_out(civ: Path,
                                                 messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    own = start(env, "opus", *IDLE)
    try:
        wait_for(lambda: heartbeat(civ, "opus").get("state") == "sleeping")
        proc = scheduler(env, *EVERY)
        try:
            wait_for(lambda: len(idle("aria")) >= 2 and len(idle("mira")) >= 2, timeout=60)
        finally:
            out = stop(proc)
    finally:
        stop(own)
    assert "opus: left out - citizen opus runs its own daemon" in out
    assert idle("opus") == []


def test_a_citizen_whose_code_is_its_own_is_gated_by_its_own_wake(
        own_code: Path, messages_api: MessagesServer) -> None:
    """The scheduler gates with the release's code; opus changed his, so his own wake
    runs his gate (and logs the idle wake in his home), while mira's stay the scheduler's."""
    civ = paths.civ_root()
    flow = paths.home("opus").code / "citizen" / "wake" / "flow.py"
    flow.write_text(flow.read_text() + "\n# opus's own\n")
    proc = scheduler(daemon_env(civ, messages_api), *EVERY)
    try:
        wait_for(lambda: len(logs("opus")) >= 2 and len(idle("mira")) >= 2, timeout=90)
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert idle("opus") == []
    assert all(w[-1]["status"] in ("idle", "skipped") for w in logs("opus"))


def test_a_planted_link_at_the_doorbell_is_not_followed(civ: Path,
                                                        messages_api: MessagesServer) -> None:
    """mira swaps her doorbell folder for a link into the scheduler's store (or a ring for
    a link to a file she may not read): the scheduler reads nothing there, writes nothing,
    and the others run."""
    store = Store()
    store.make()
    (store.state / "secret.json").write_text('{"wake_type": "TASK", "reason": "stolen"}')
    bell = paths.home("aria").doorbell
    (bell / "1-1-TASK.json").symlink_to(store.state / "secret.json")
    mira = paths.home("mira").doorbell
    os.rename(mira, mira.with_name("mira.real"))
    mira.symlink_to(store.state)
    with pytest.raises(OSError):
        doorbell.peek(mira, os.geteuid())
    assert doorbell.peek(bell, os.geteuid()) == []
    proc = scheduler(daemon_env(civ, messages_api), *EVERY)
    try:
        wait_for(lambda: len(idle("aria")) >= 2 and len(idle("opus")) >= 2, timeout=60)
    finally:
        out = stop(proc)
    assert "citizen mira: not scheduled" in out
    assert sorted(p.name for p in store.state.iterdir()) == [
        "idle", "secret.json", "slots", "status.json"]
    assert all("stolen" not in json.dumps(r) for r in idle("aria"))
    assert json.loads((store.state / "status.json").read_text())["citizens"]["mira"][
        "state"] == "failed"


@pytest.mark.parametrize("request_body", [
    "not json", '{"type": "TASK; rm -rf ~", "slot": null}', '{"type": null, "slot": -1}',
    '{"type": null, "slot": null}', '{"type": "TASK", "rings": "../../etc"}'])
def test_a_request_the_scheduler_did_not_write_runs_nothing(
        civ: Path, tmp_path: Path, request_body: str) -> None:
    path = tmp_path / "request"
    path.write_text(request_body)
    with pytest.raises(unit.BadRequest):
        unit.run_request("mira", path)
    assert logs("mira") == []


def test_rings_handed_to_a_wake_are_plain_names_in_its_own_doorbell(civ: Path) -> None:
    bell = paths.home("mira").doorbell
    kept = doorbell.ring(bell, "TASK", "kept")
    taken = doorbell.ring(bell, "TASK", "taken")
    outside = civ / "mira" / "notes.md"
    outside.write_text("mine")
    removed = doorbell.consume(bell, [taken.name, "../../mira/notes.md", ".", "", "..x"])
    assert removed == 1 and kept.exists() and not taken.exists() and outside.exists()


def test_status_says_the_scheduler_keeps_the_schedule(civ: Path,
                                                      messages_api: MessagesServer) -> None:
    env = daemon_env(civ, messages_api)
    proc = scheduler(env, *EVERY)
    try:
        wait_for(lambda: all(idle(n) for n in NAMES) and Store().status(), timeout=60)
        wait_for(lambda: all(n in (Store().status() or {}).get("citizens", {})
                             for n in NAMES))
        shown = subprocess.run([sys.executable, "-m", "citizen", "status"], env=env,
                               text=True, capture_output=True, check=True).stdout
    finally:
        stop(proc)
    # `citizen logs` lists the home's wakes, and says where the scheduler's idle ones are.
    assert "idle wakes in the scheduler, the last" in cli(env, "logs", "aria")
    for name in NAMES:
        row = next(line for line in shown.splitlines() if line.startswith(name))
        assert f"scheduled: sleeping (scheduler pid {proc.pid})" in row \
            or "scheduled: waking" in row, shown
        assert "none" not in row.split("scheduler pid")[1][:40], row  # its last wake shown


def test_a_citizen_held_for_its_disk_budget_gets_no_wake(
        civ: Path, messages_api: MessagesServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's disk check stopped mira (past her budget): the scheduler starts no wake
    for her task, while opus's runs."""
    state = civ / ".disk"
    state.mkdir()
    (state / "mira.json").write_text(json.dumps({
        "schema_version": 1, "citizen": "mira", "used_mb": 3.0, "budget_mb": 2,
        "state": "over", "checked_at": "2026-11-26T10:00:00.000Z",
        "stopped_at": "2026-11-26T10:00:00.000Z", "note": ""}))
    messages_api.responder = worker
    env = daemon_env(civ, messages_api)
    proc = scheduler(env, *IDLE)
    try:
        wait_for(lambda: "3 citizens in one process" in proc.output())
        cli(env, "task", "add", "mira", "Write notes/out.md")
        wait_for(lambda: "past its disk budget" in proc.output())
        cli(env, "task", "add", "opus", "Write notes/out.md")
        wait_for(lambda: TaskQueue(paths.home("opus").tasks).ids("done"), timeout=90)
    finally:
        stop(proc)
    assert logs("mira") == [] and TaskQueue(paths.home("mira").tasks).ids("queue")


def test_a_citizens_first_wake_is_its_own_and_writes_its_heartbeat(
        civ: Path, messages_api: MessagesServer) -> None:
    """mira never woke (no heartbeat): her first wake runs in her unit and says she is
    scheduled - her peers' PEER_MONITOR finds her alive - and the next are the scheduler's."""
    (civ / "shared" / "monitor" / "heartbeats" / "mira.json").unlink()
    proc = scheduler(daemon_env(civ, messages_api), *EVERY)
    try:
        wait_for(lambda: len(idle("mira")) >= 2 and len(idle("opus")) >= 2, timeout=60)
    finally:
        stop(proc)
    assert len(logs("mira")) == 1 and logs("opus") == []
    assert heartbeat(civ, "mira")["state"] == "scheduled"


def test_stopping_a_wake_unit_interrupts_its_wake_and_loses_nothing(
        civ: Path, messages_api: MessagesServer, tmp_path: Path) -> None:
    """systemd stops a wake unit (the operator, the disk check) with SIGTERM to its main
    process: the wake is interrupted as a daemon's second SIGTERM does it - its log ends,
    its task goes back to wait - not killed with the process."""
    messages_api.reply(no_deliverables())
    messages_api.reply(tool_use("respond", {"tools": ["task_complete"]}))
    messages_api.reply(tool_use("respond", {"tier": "fast"}))
    messages_api.reply(tool_use("task_complete", {"summary": "never"}), delay_s=30)
    env = daemon_env(civ, messages_api)
    cli(env, "task", "add", "opus", "slow")
    request = tmp_path / "request"
    request.write_text(json.dumps({"type": "TASK", "slot": None, "reason": "test"}))
    proc = Daemon([sys.executable, "-m", "citizen", "run", "opus", "--request", str(request)],
                  env)
    try:
        wait_for(lambda: len(messages_api.requests) >= 4, timeout=60)  # the slow call
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (log,) = wakelog.wake_logs(paths.home("opus"))
    assert wakelog.summary(log)["status"] == "interrupted", out
    assert TaskQueue(paths.home("opus").tasks).ids("active")  # taken up again next wake


# ------------------------------------------------------------ a hostile citizen's home

def hosted(name: str, started: list[dict[str, Any]]) -> scheduled.Scheduled:
    """Citizen `name` as the scheduler holds it, in this process; its units only noted."""
    store = Store()
    store.make()

    def starter(_: str, request: Path, __: float) -> int:
        started.append(unit.read_request(request))  # what the wake unit would read
        return 0

    return scheduled.Scheduled(name, store=store, starter=starter, interval_s=3600,
                               first_wake_s=3600, scheduler=BackgroundScheduler())


def ends(fn: Callable[[], object], within_s: float = 30.0) -> bool:
    """Whether `fn()` ended (a hung one is left blocked in its thread)."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(within_s)
    return not thread.is_alive()


def under_2_gb(code: str) -> subprocess.CompletedProcess[str]:
    """Python `code` run with 2 GB of address space: a read of a planted sparse giant
    fails there with MemoryError (in the scheduler's unit, MemoryMax=1G kills it)."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2**31, 2**31))\n"
    return subprocess.run([sys.executable, "-c", limit + code], capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_fifo_that_hangs_a_gate_frees_its_worker(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mira makes her state.json a FIFO: the gate here blocks opening it. Its worker is
    freed after GATE_S (else six such citizens stop the scheduler for everyone) and her
    wakes go to her unit, which runs her gate as herself."""
    monkeypatch.setattr(scheduled, "GATE_S", 0.5, raising=False)  # before it: a hang
    fifo = paths.home("mira").state
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    started: list[dict[str, Any]] = []
    mira = hosted("mira", started)
    try:
        assert ends(lambda: mira._run_wake(WakeRequest(None, "slot")))
        assert ends(lambda: mira._run_wake(WakeRequest(None, "slot")), within_s=0.4)
    finally:  # a writer lets the blocked reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert [r["slot"] for r in started] == [0, 1] and mira.gate_stuck


def test_a_flood_of_rings_does_not_break_the_wake_request(civ: Path) -> None:
    """A peer plants 600 rings with long names in mira's doorbell (group-writable): her
    wake's request stays one read_request takes (64 KB), the rest wait for the next."""
    bell = paths.home("mira").doorbell
    for i in range(600):  # 72 KB of names
        (bell / f"{i:04d}-{'x' * 110}.json").write_text('{"wake_type": "TASK"}')
    doorbell.ring(bell, "TASK", "the operator's task")
    started: list[dict[str, Any]] = []
    mira = hosted("mira", started)
    mira._enqueue_rings()
    mira._start_unit(mira.requests.get_nowait(), None)
    mira._start_unit(WakeRequest("TASK", "doorbell: again"), None)
    handed = [r for req in started for r in req["rings"]]
    assert len(started) == 2 and len(handed) == len(set(handed)) == 2 * scheduled.MAX_HANDED


def test_a_sparse_giant_in_the_code_is_not_read(civ: Path) -> None:
    """opus makes ~/code/citizen/__init__.py a sparse 3 GB file (it costs no disk): the
    scheduler deciding whether his code is the release's does not read it (its memory is
    every citizen's)."""
    code = paths.home("opus").code
    (code / "citizen").mkdir(parents=True, exist_ok=True)
    (code / "shared").mkdir(exist_ok=True)
    with (code / "citizen" / "__init__.py").open("wb") as f:
        f.truncate(3 * 2**30)
    done = under_2_gb("from pathlib import Path\nfrom citizen.daemon.scheduled import "
                      f"SameCode\nprint(SameCode(Path({str(code)!r})).is_release())")
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr[-500:]


def test_a_folder_the_release_has_not_is_not_walked(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted tree (a million files would cost the scheduler seconds and hundreds of MB
    at every gate) ends the comparison at its top: nothing in it is listed."""
    code = paths.home("opus").code
    for package in scheduled.CODE:
        (code / package).mkdir(parents=True, exist_ok=True)
    (code / "citizen" / "__init__.py").write_text("")
    deep = code / "citizen" / "planted" / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "x.py").write_text("")
    walked: list[str] = []
    real = os.walk

    def spy(top: Path) -> Any:
        for found in real(top):
            walked.append(found[0])
            yield found

    scheduled._release()  # the release's own listing, before the spy
    monkeypatch.setattr(os, "walk", spy)
    assert not scheduled.SameCode(code).is_release()
    assert not any("planted" in w for w in walked), walked


def test_rings_of_types_no_module_registers_ask_for_nothing(civ: Path) -> None:
    """A peer rings mira with a thousand invented wake types: none is a request (each
    was one, and past the doorbell's hourly cap a deferred job in the one scheduler)."""
    bell = paths.home("mira").doorbell
    for i in range(1000):
        doorbell.ring(bell, f"JUNK_{i}", "invented")
    doorbell.ring(bell, "TASK", "the operator's task")
    mira = hosted("mira", [])
    mira._enqueue_rings()
    assert mira.requests.get_nowait().wake_type == "TASK" and mira.requests.empty()
