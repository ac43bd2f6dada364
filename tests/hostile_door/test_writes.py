"""Root writes where a citizen can write, and a citizen's own files where peers look:
issue 42's findings 1, 4, 5 (writer side) and 6, on a booted server with real Unix users.

Each test is the attack as it broke the code before the door (ffe564b):
- root's `citizen task add` rang the doorbell with a temp file it then chmodded and
  chowned by name: the citizen swapped it for a link to /etc/experience/opus.env and
  root made that file the citizen's, 0660 (made deterministic here by a fault point
  armed through an audit hook in root's own interpreter: it pauses root at its first
  chmod of the temp file until the attacker has moved);
- a doorbell folder renamed away and a link to /etc put in its place: root created
  citizen-owned files in /etc;
- a peer's `flock -s` on ~opus/.daemon.lock (0640) made opus's daemon fail
  AlreadyRunning for ever;
- heartbeats 0664: a peer rewrote another's state;
- a peer's sparse 1 TB spend ledger: MemoryError in every other citizen's cap check.
"""

from __future__ import annotations

import json

import pytest

from tests.hostile_door.conftest import as_root, as_user, spawn
from tests.nspawn import Container, until

pytestmark = pytest.mark.usefixtures("box")

RELEASE = ("env", "CIV_ROOT=/home", "PYTHONPATH=/tmp/fault:/opt/experience/release",
           "PYTHONDONTWRITEBYTECODE=1", "/opt/experience/venv/bin/python")
# Root's interpreter pauses at its first chmod (by name or descriptor) of a temp file in
# opus's doorbell: it says which file in /tmp/fault/armed and waits for /tmp/fault/go.
FAULT = r'''
import os, sys, time
def _hook(event, args):
    if event != "os.chmod" or os.path.exists("/tmp/fault/armed"):
        return
    target = args[0]
    name = os.readlink(f"/proc/self/fd/{target}") if isinstance(target, int) else str(target)
    if "/doorbell/opus/" in name and name.endswith(".tmp"):
        with open("/tmp/fault/armed", "w") as f:
            f.write(name)
        deadline = time.monotonic() + 120
        while not os.path.exists("/tmp/fault/go") and time.monotonic() < deadline:
            time.sleep(0.05)
sys.addaudithook(_hook)
'''


def _mode_owner(box: Container, path: str) -> str:
    return as_root(box, f"stat -c '%a %U' {path}").strip()


def test_a_temp_file_swapped_for_a_link_gives_the_citizen_nothing(box: Container) -> None:
    """The race, won every time: root pauses after creating its temp file, opus (who
    owns the folder) replaces it with a link to its own key file, root goes on."""
    before = _mode_owner(box, "/etc/experience/opus.env")
    assert before == "600 experience-broker" or before.startswith("600 ")
    as_root(box, "rm -rf /tmp/fault; mkdir -m 0755 /tmp/fault; "
                 f"cat > /tmp/fault/sitecustomize.py <<'PY'\n{FAULT}\nPY")
    root = spawn(box, *RELEASE, "-m", "citizen", "task", "add", "opus", "a task for opus")
    try:
        until(lambda: as_root(box, "cat /tmp/fault/armed 2>/dev/null", check=False), 120)
        temp = as_root(box, "cat /tmp/fault/armed").strip()
        as_user(box, "opus", f"rm -f '{temp}' && ln -s /etc/experience/opus.env '{temp}'")
        as_root(box, "touch /tmp/fault/go")
        out, err = root.communicate(timeout=120)
    finally:
        if root.poll() is None:
            root.kill()
    assert "queued" in out, err
    assert _mode_owner(box, "/etc/experience/opus.env") == before
    assert as_user(box, "opus", "cat /etc/experience/opus.env 2>&1; true").count(
        "Permission denied") == 1


def test_a_doorbell_swapped_for_a_link_to_etc_gets_nothing_written_there(
        box: Container) -> None:
    """opus renames its doorbell folder away (it owns it; the sticky parent lets an
    owner rename its own) and puts a link to /etc in its place; root's ring follows
    nothing and says why (the command fails, naming the link), the task is queued, and
    /etc holds nothing of opus's."""
    as_user(box, "opus", "cd /home/shared/doorbell && mv opus opus.away && ln -s /etc opus")
    try:
        out = as_root(box, "citizen task add opus 'another task' 2>&1", check=False)
        assert "is a symbolic link or not a directory; nothing was read or written" in out
        assert "another task" in as_root(box, "cat /home/opus/tasks/queue/*.json")
        assert as_root(box, "find /etc -user opus").strip() == ""
    finally:
        as_user(box, "opus", "cd /home/shared/doorbell && rm opus && mv opus.away opus")


def test_a_peers_lock_silences_no_citizen(box: Container) -> None:
    """mira holds opus's daemon lock shared, through a descriptor opened while the file
    was 0640 (as an older release left it): opus's daemon starts anyway, on a new 0600
    lock file mira cannot open."""
    lock = "/home/opus/.daemon.lock"
    started = box.run("systemctl", "start", "citizen@opus", check=False)  # its lock: made
    assert started.returncode == 0, as_root(box, "journalctl -u citizen@opus --no-pager "
                                                 "-n 60", check=False)
    until(lambda: _sleeping(box, "opus"), 120)
    as_root(box, "systemctl stop citizen@opus")
    as_root(box, f"chmod 0640 {lock}")
    as_user(box, "mira", f"setsid -f flock -s {lock} sleep 900 </dev/null >/dev/null 2>&1")
    until(lambda: "mira" in as_root(box, "ps -o user= -C flock", check=False), 30)
    try:
        again = box.run("systemctl", "start", "citizen@opus", check=False)
        assert again.returncode == 0, as_root(box, "journalctl -u citizen@opus --no-pager "
                                                   "-n 40", check=False)
        until(lambda: as_root(box, "systemctl is-active citizen@opus", check=False).strip()
              == "active" and _sleeping(box, "opus"), 120)
        assert _mode_owner(box, lock) == "600 opus"
        refused = box.run("runuser", "-u", "mira", "--", "flock", "-s", "-n", lock, "true",
                          check=False)
        assert refused.returncode != 0
        journal = as_root(box, "journalctl -u citizen@opus --no-pager -n 200")
        assert "not by opus's own processes: replaced" in journal
    finally:
        as_root(box, "pkill -u mira -x flock; pkill -u mira -f 'sleep 900'; true")


def _sleeping(box: Container, name: str) -> bool:
    status = as_root(box, f"systemctl show -p StatusText --value citizen@{name}")
    return f"citizen:{name} sleeping" in status


def test_a_peer_cannot_rewrite_a_heartbeat(box: Container) -> None:
    """Heartbeats were 0664: mira rewrote opus's state, pid and next wake."""
    beat = "/home/shared/monitor/heartbeats/opus.json"
    as_root(box, "systemctl restart citizen@opus")  # a heartbeat written by this release
    until(lambda: _sleeping(box, "opus"), 120)
    assert _mode_owner(box, beat) == "644 opus"
    tried = box.run("runuser", "-u", "mira", "--", "sh", "-c",
                    f"echo '{{\"state\": \"sleeping\", \"pid\": 1}}' > {beat}", check=False)
    assert tried.returncode != 0
    assert json.loads(as_root(box, f"cat {beat}"))["pid"] != 1


def test_a_peers_sparse_ledger_breaks_no_cap_check(box: Container) -> None:
    """mira plants a sparse terabyte as today's spend ledger; opus's cap check (its own
    process, the release's code) reads every peer's ledger before each model call."""
    day = as_root(box, "date -u +%F").strip()
    as_user(box, "mira", f"mkdir -p ~/logs/spend && truncate -s 1T ~/logs/spend/{day}.jsonl")
    try:
        check = ("from citizen.config import paths; from citizen.home import spend; "
                 "d = spend.Daily(paths.home('opus'), 5.0, 100.0, [paths.home('mira')]); "
                 "d.check(0.01); print('checked', spend.spent(paths.home('mira'), "
                 "spend.today()))")
        out = box.run("runuser", "-u", "opus", "--", "env", "CIV_ROOT=/home",
                      "PYTHONPATH=/opt/experience/release", "/opt/experience/venv/bin/python",
                      "-c", check).stdout
        assert out.strip() == "checked 0.0"
    finally:
        as_user(box, "mira", f"rm -f ~/logs/spend/{day}.jsonl")


def test_an_upgrade_repairs_the_modes_an_older_release_left(box: Container) -> None:
    """An older release left doorbells 2770 (a peer deleted another's rings), heartbeats
    0664 and daemon locks 0640: setup_server.sh's upgrade step repairs them, through
    descriptors, for every citizen (here its step alone: `python -m citizen.admin.modes`)."""
    as_root(box, "systemctl start citizen@opus")  # its heartbeat and lock exist once it ran
    until(lambda: _sleeping(box, "opus"), 120)
    as_root(box, "systemctl stop citizen@opus; chmod 2770 /home/shared/doorbell/opus; "
                 "chmod 0664 /home/shared/monitor/heartbeats/opus.json; "
                 "chmod 0640 /home/opus/.daemon.lock")
    out = as_root(box, "CIV_ROOT=/home PYTHONPATH=/opt/experience/release "
                       "/opt/experience/venv/bin/python -m citizen.admin.modes opus")
    assert out.count("changed: ") == 3, out
    # Setup made the rooms' folder root's and sticky (a citizen used to make it, its own).
    assert _mode_owner(box, "/home/shared/streams/rooms") == "3775 root"
    assert _mode_owner(box, "/home/shared/doorbell/opus") == "3770 opus"
    assert _mode_owner(box, "/home/shared/monitor/heartbeats/opus.json") == "644 opus"
    assert _mode_owner(box, "/home/opus/.daemon.lock") == "600 opus"
    assert as_root(box, "CIV_ROOT=/home PYTHONPATH=/opt/experience/release "
                        "/opt/experience/venv/bin/python -m citizen.admin.modes opus") == ""
    as_user(box, "mira", "touch /home/shared/doorbell/opus/x.json")  # mira rings
    removed = box.run("runuser", "-u", "aria", "--", "rm", "-f",
                      "/home/shared/doorbell/opus/x.json", check=False)
    assert removed.returncode != 0  # sticky: aria removes no ring mira rang
    as_root(box, "rm -f /home/shared/doorbell/opus/x.json; systemctl start citizen@opus")
