"""The server's scheduler against a hostile citizen's home (and a peer's): what it reads
there is data - a FIFO, a sparse giant, a planted tree, a flood of rings, invented wake
types - and none of it stalls, crashes or misleads the one process every citizen's
schedule lives in. In this process, on the scheduler's own objects; the booted tests
are tests/test_scheduler_server.py."""

from __future__ import annotations

import os
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
from citizen.daemon import scheduled, unit
from citizen.daemon.requests import WakeRequest
from citizen.home import state as home_state
from shared import doorbell
from tests.daemons import have_run


@pytest.fixture
def civ(civ: Path) -> Path:
    have_run(("aria", "mira", "opus"))  # gated in the scheduler: each has run before
    return civ


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
    """mira makes her state.json a FIFO: the gate here blocked opening it. Through the
    door (issue 42) the read fails at once and her wake goes to her unit, which runs her
    gate as herself. What no check foresees still hangs a gate: its worker is freed after
    GATE_S (else six such citizens stop the scheduler for everyone)."""
    monkeypatch.setattr(scheduled, "GATE_S", 0.5, raising=False)  # before it: a hang
    fifo = paths.home("mira").state
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    started: list[dict[str, Any]] = []
    mira = hosted("mira", started)
    assert ends(lambda: mira._run_wake(WakeRequest(None, "slot")), within_s=0.4)
    assert [r["slot"] for r in started] == [0] and not mira.gate_stuck
    real_load = home_state.load

    def blocked(home: Any) -> Any:  # a reader outside the door, opening the FIFO
        if home.name == "mira":
            with open(fifo, "rb") as f:  # noqa: PTH123 - the blocking open under test
                f.read()
        return real_load(home)

    monkeypatch.setattr(home_state, "load", blocked)  # the module scheduled.py calls
    try:
        assert ends(lambda: mira._run_wake(WakeRequest(None, "slot")))
        assert ends(lambda: mira._run_wake(WakeRequest(None, "slot")), within_s=0.4)
    finally:  # a writer lets the blocked reader go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert [r["slot"] for r in started] == [0, 1, 2] and mira.gate_stuck


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


def test_on_a_server_a_held_lock_is_its_daemons_only_if_systemd_says_so(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a scheduler restart, mira's lock may be held by her own wake unit (a wake
    it started before): she is scheduled still. Only citizen@mira running leaves her out.
    Before, the held lock alone left her out until the next restart."""
    from shared.locks import locked

    mira = hosted("mira", [])
    mira.starter = scheduled.systemd_starter
    active: list[int] = [3]  # systemctl is-active: 3, inactive
    asked: list[list[str]] = []

    def systemctl(args: list[str], **_: Any) -> subprocess.CompletedProcess[bytes]:
        asked.append(args)
        return subprocess.CompletedProcess(args, active[0])

    monkeypatch.setattr(subprocess, "run", systemctl)
    assert not mira.own_daemon_runs() and asked == []  # no lock held: nothing asked
    lock = paths.home("mira").daemon_lock
    with locked(lock, lock_file=lock, timeout=0, mode=0o640):  # her wake unit's, say
        assert not mira.own_daemon_runs()
        active[0] = 0  # citizen@mira is active: her own daemon holds it
        assert mira.own_daemon_runs()
    assert asked[-1] == ["systemctl", "is-active", "--quiet", "citizen@mira.service"]
