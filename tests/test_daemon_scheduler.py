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
from pathlib import Path
from typing import Any

import pytest

from citizen.admin.schedstore import Store
from citizen.config import paths
from citizen.daemon import unit
from citizen.home import wakelog
from citizen.home.tasks import TaskQueue
from shared import doorbell
from tests.anthropic_server import MessagesServer, no_deliverables, tool_use
from tests.daemons import (
    Daemon,
    cli,
    daemon_env,
    have_run,
    heartbeat,
    start,
    wait_for,
    worker,
)

NAMES = ("aria", "mira", "opus")
IDLE = ("--interval", "3600", "--first-wake", "3600")  # only the doorbell wakes them
EVERY = ("--interval", "0.5", "--first-wake", "0")


def scheduler(env: dict[str, str], *args: str) -> Daemon:
    return start(env, "--all", "--scheduler", *args)


@pytest.fixture
def civ(civ: Path) -> Path:
    """The three, having run before: each has its heartbeat (a citizen that never woke
    has its first wake in its unit, to write one - test_a_first_wake_...)."""
    have_run(NAMES)
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
