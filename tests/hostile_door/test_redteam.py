"""A red team's attacks on the door (issue 42), on a booted server with real Unix users:
a hostile citizen with a shell against the scheduler, the citizens' daemons and root's
CLI. Each test is an attack that broke the code before its fix:

- mira planted a line of 4,000 `[` in a doorbell: the scheduler's one doorbell thread
  died of a RecursionError (shared/doorbell.py read rings with json.loads), and no
  citizen's ring was heard again until it restarted;
- mira planted a FIFO in opus's doorbell (3770: peers ring): opus's own daemon opened
  it by name and hung, deaf to every ring after;
- a room document of 5,000 `[` (any citizen writes the rooms' folder, 3775): the room's
  governance parsed it with json.loads, and every citizen's `waiting_for` (each wake's
  question "which streams want me?") died of a RecursionError.
"""

from __future__ import annotations

from pathlib import Path

from citizen import civilization
from tests.hostile_door.conftest import as_root, as_user
from tests.nspawn import Container, until

BELLS = "/home/shared/doorbell"
BOMB = "python3 -c 'import sys; open(sys.argv[1], \"w\").write(\"[\" * 4000)'"


def _journal(box: Container, unit: str) -> str:
    return as_root(box, f"journalctl -u {unit} --no-pager -n 400", check=False)


def _task_id(out: str) -> str:
    return out.split()[1]  # "queued t-... for NAME; ..."


def test_a_peers_planted_rings_deafen_neither_a_daemon_nor_the_scheduler(
        box: Container) -> None:
    """mira plants a FIFO and a parser bomb in opus's and aria's doorbells; root's next
    ring is heard within seconds by opus's own daemon and by the scheduler for aria."""
    was_active = as_root(box, "systemctl is-active citizen@opus", check=False).strip()
    as_root(box, "systemctl start citizen@opus")
    until(lambda: "daemon running" in _journal(box, "citizen@opus"), 60)
    try:
        as_user(box, "mira", f"mkfifo -m 0660 {BELLS}/opus/1-x-TASK.json && "
                             f"{BOMB} {BELLS}/opus/2-x-TASK.json")
        queued = _task_id(as_root(box, "citizen task add opus 'heard through a FIFO'"))
        until(lambda: f"doorbell: TASK wake for task {queued}" in _journal(
            box, "citizen@opus"), 30)
        # opus's daemon runs, so the scheduler leaves opus out and keeps mira and aria.
        as_root(box, "systemctl start experience-scheduler")
        until(lambda: "citizens in one process" in _journal(box, "experience-scheduler"), 60)
        as_user(box, "mira", f"{BOMB} {BELLS}/aria/1-x-TASK.json")
        queued = _task_id(as_root(box, "citizen task add aria 'heard after a bomb'"))
        until(lambda: f"doorbell: TASK wake for task {queued}" in _journal(
            box, "experience-scheduler"), 30)
    finally:
        as_root(box, "systemctl stop experience-scheduler; "
                     f"rm -f {BELLS}/opus/.1-x-* {BELLS}/opus/.2-x-* {BELLS}/opus/[12]-x-* "
                     f"{BELLS}/aria/1-x-*")
        if was_active != "active":
            as_root(box, "systemctl stop citizen@opus")


def test_a_planted_room_bomb_stops_no_citizens_streams(civ: Path) -> None:
    """In-process (no boot): a room document nested 5,000 deep makes that room's
    governance unreadable (CorruptFile), and a peer's streams elsewhere go on."""
    store = civilization.streams()
    sid = store.open("m-1@x", "hello all", room="general").id
    store.open("m-2@x", "hello again", room="lab")
    rooms = civ / "shared" / "streams" / "rooms"
    (rooms / "general.json").unlink(missing_ok=True)
    (rooms / "general.json").write_text("[" * 5000)
    waiting = store.waiting_for("opus")
    assert sid not in waiting and len(waiting) == 1
