"""The server's one scheduler on a booted server with real Unix users (issue 33;
docs/architecture.md §7): sleeping citizens have no process, their idle wakes are the
scheduler's, a wake with work runs as its citizen in `citizen-wake@NAME`, and what a
citizen can plant - a link at its doorbell or a ring, a forged request, a kill of the
scheduler - reads, writes and starts nothing it should not.

Boots its own container (tests/nspawn.py); root and systemd-nspawn needed, skipped with
the reason elsewhere. The polkit rule itself (who may start which unit) is
tests/test_scheduler_units_server.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.anthropic_server import API_KEY, MessagesServer
from tests.daemons import worker
from tests.nspawn import Container, set_up_server, unavailable, until

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

CITIZENS = ("opus", "mira", "aria")
STATE = "/var/lib/experience-scheduler"


@pytest.fixture(scope="module")
def box() -> Iterator[Container]:
    """A server switched from a daemon each to the scheduler, as DEPLOY.md says: each
    citizen has run (its heartbeat says so), then the scheduler takes over."""
    with set_up_server(paths.project_dir(), "experience-sched") as (box, _):
        box.run("systemctl", "start", "citizens.target")
        for name in CITIZENS:
            until(lambda name=name: box.run(  # type: ignore[misc]
                "test", "-e", f"/home/shared/monitor/heartbeats/{name}.json",
                check=False).returncode == 0, 120)
        box.run("systemctl", "disable", "--now", "citizens.target")
        box.run("systemctl", "enable", "--now", "experience-scheduler")
        yield box


def idle(box: Container, name: str) -> list[dict[str, object]]:
    out = box.run("cat", f"{STATE}/idle/{name}.jsonl", check=False).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def as_user(box: Container, user: str, script: str) -> str:
    done = box.run("runuser", "-u", user, "--", "sh", "-c", script, check=False)
    return done.stdout + done.stderr


def processes_of(box: Container, name: str) -> list[str]:
    out = box.run("ps", "-u", name, "-o", "pid=,args=", check=False).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_sleeping_citizens_have_no_process_and_idle_wakes_are_the_schedulers(
        box: Container) -> None:
    before = {n: box.run("ls", f"/home/{n}/logs/wakes").stdout for n in CITIZENS}
    for name in CITIZENS:  # the first wake comes within the minute's spread
        until(lambda name=name: idle(box, name), timeout=150)  # type: ignore[misc]
    for name in CITIZENS:
        assert processes_of(box, name) == [], name  # asleep: nothing of its own runs
        assert box.run("ls", f"/home/{name}/logs/wakes").stdout == before[name]
    owners = box.run("stat", "-c", "%U %a", f"{STATE}/idle/opus.jsonl").stdout.split()
    assert owners == ["experience-scheduler", "640"]
    shown = box.run("citizen", "status").stdout
    pid = box.run("systemctl", "show", "-p", "MainPID", "--value",
                  "experience-scheduler").stdout.strip()
    for name in CITIZENS:
        row = next(line for line in shown.splitlines() if line.startswith(name))
        assert f"scheduled: sleeping (scheduler pid {pid})" in row, shown
    smaps = box.run("cat", f"/proc/{pid}/smaps_rollup").stdout
    private = sum(int(line.split()[1]) for line in smaps.splitlines()
                  if line.startswith(("Private_Clean", "Private_Dirty")))
    print(f"\nthe scheduler with {len(CITIZENS)} citizens: USS {private / 1024:.1f} MB")


def test_a_task_runs_as_its_citizen_in_its_own_unit(box: Container,
                                                    messages_api: MessagesServer) -> None:
    messages_api.responder = worker
    box.run("sh", "-c", f"printf 'ANTHROPIC_API_KEY={API_KEY}\\nANTHROPIC_BASE_URL="
            f"{messages_api.url}\\n' >> /etc/experience/opus.env")
    box.run("citizen", "task", "add", "opus", "Write notes/out.md")

    def done() -> str:
        return box.run("ls", "/home/opus/tasks/done").stdout.strip()

    until(done, 180)
    assert box.run("stat", "-c", "%U", "/home/opus/notes/out.md").stdout.strip() == "opus"

    def ended() -> bool:
        return box.run("systemctl", "is-active", "citizen-wake@opus",
                       check=False).stdout.strip() == "inactive"

    until(ended, 120)
    journal = box.run("journalctl", "--no-pager", "-u", "citizen-wake@opus").stdout
    assert re.search(r"wake \d+ TASK: ok", journal) and "ERROR" not in journal, journal
    assert processes_of(box, "opus") == []  # the unit ended: nothing of opus runs
    # The operator's network rule holds in the wake unit as in the daemon's (onboarding
    # wrote both drop-ins): without it, a citizen run by the scheduler saw the network.
    assert box.run("systemctl", "show", "-p", "PrivateNetwork", "--value",
                   "citizen-wake@opus").stdout.strip() == "yes"
    assert not box.run("ls", "/home/shared/doorbell/opus").stdout.strip()  # ring taken


def test_a_citizen_can_neither_forge_nor_read_a_request(box: Container) -> None:
    out = as_user(box, "mira", "echo '{\"type\": \"TASK\"}' > "
                  "/run/experience-scheduler/wake/opus.json; "
                  "cat /run/experience-scheduler/wake/opus.json; "
                  f"ls {STATE}/slots; systemctl start citizen-wake@opus.service")
    assert out.count("Permission denied") >= 3, out
    assert "Access denied" in out or "Interactive authentication required" in out, out


def test_a_link_planted_at_a_doorbell_reads_nothing_of_the_schedulers(
        box: Container) -> None:
    """mira swaps her doorbell folder for a link to the scheduler's store, aria rings
    herself with a link to its status: neither is followed. mira is left out and said;
    the others are scheduled as before."""
    before = box.run("ls", "-la", STATE).stdout
    as_user(box, "mira", "cd /home/shared/doorbell && mv mira mira.real && "
            f"ln -s {STATE} mira")
    as_user(box, "aria", f"ln -s {STATE}/status.json /home/shared/doorbell/aria/1-1-TASK.json")
    box.run("systemctl", "restart", "experience-scheduler")
    until(lambda: "citizen mira: not scheduled" in box.run(
        "journalctl", "--no-pager", "-u", "experience-scheduler").stdout, 60)
    until(lambda: len(idle(box, "aria")) >= 2, 150)
    assert all(r.get("type") != "TASK" for r in idle(box, "aria"))  # the link rang nothing
    after = box.run("ls", "-la", STATE).stdout
    assert [line.split()[-1] for line in after.splitlines()] == \
        [line.split()[-1] for line in before.splitlines()]  # nothing new in its store
    status = json.loads(box.run("cat", f"{STATE}/status.json").stdout)
    assert status["citizens"]["mira"]["state"] == "failed"
    as_user(box, "mira", "cd /home/shared/doorbell && rm mira && mv mira.real mira")
    as_user(box, "aria", "rm /home/shared/doorbell/aria/1-1-TASK.json")


def test_a_sparse_giant_in_a_home_fails_only_its_own_gate(box: Container) -> None:
    """opus swaps his state.json for a sparse 3 GB file and rings himself: the gate that
    reads it in the scheduler fails and hands the wake to opus's unit - the scheduler,
    everyone's, stays up. Through the door (issue 42) the file is refused unread, past
    its reader's cap; before, reading it raised MemoryError against the address-space
    cap (LimitAS, still the backstop for what no reader foresees)."""
    pid = box.run("systemctl", "show", "-p", "MainPID", "--value",
                  "experience-scheduler").stdout.strip()
    as_user(box, "opus", "cd /home/opus && cp state.json state.keep && truncate -s 3G state.json"
            " && cd /home/shared/doorbell/opus && printf '%s' '{\"wake_type\": \"REFLECT\","
            " \"reason\": \"me\", \"sender\": \"opus\"}' > .ring && mv .ring 1-1-REFLECT.json")
    try:
        until(lambda: "the gate failed here" in box.run(
            "journalctl", "--no-pager", "-u", "experience-scheduler").stdout, 90)
        assert box.run("systemctl", "show", "-p", "MainPID", "--value",
                       "experience-scheduler").stdout.strip() == pid  # not killed
        journal = box.run("journalctl", "--no-pager", "-u", "experience-scheduler").stdout
        assert "its reader takes - not read" in journal and "MemoryError" not in journal
    finally:
        as_user(box, "opus", "cd /home/opus && mv state.keep state.json")


def test_kill_9_of_the_scheduler_hands_no_slot_out_twice(box: Container) -> None:
    """systemd brings a killed scheduler back at once, and its slot counters go on from
    where they were (a slot decides a mandatory wake type: none is handed out twice)."""
    first = box.run("systemctl", "show", "-p", "MainPID", "--value",
                    "experience-scheduler").stdout.strip()

    def handed(name: str) -> int:
        raw = box.run("cat", f"{STATE}/slots/{name}.json", check=False).stdout
        return int(json.loads(raw)["next"]) if raw else 0

    counted = {n: handed(n) for n in ("opus", "aria")}
    assert all(counted.values()), counted
    box.run("systemctl", "kill", "-s", "KILL", "experience-scheduler")

    def restarted() -> bool:
        pid = box.run("systemctl", "show", "-p", "MainPID", "--value",
                      "experience-scheduler").stdout.strip()
        return pid not in ("0", first)

    until(restarted, 60)
    for name, n in counted.items():
        until(lambda name=name, n=n: handed(name) > n, 150)  # type: ignore[misc]
        slots = [int(str(r["slot"])) for r in idle(box, name) if r.get("slot") is not None]
        assert slots == sorted(set(slots)), (name, slots)  # none twice, in order
