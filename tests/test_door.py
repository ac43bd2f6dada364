"""The trusted door (shared/door.py, shared/atomic.py): what a citizen prepares where a
more privileged writer or reader goes - a link swapped in for the writer's temp file, a
link in place of its folder, a parser bomb, a sparse giant, a gzip bomb, a FIFO, a lock
opened through read access. Each test performs the attack; each failed on the code
before the door (80c9e3f's parent), as its docstring says. The booted versions, with
real Unix users, are tests/hostile_door/test_writes.py."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from citizen.config import paths
from citizen.daemon import instance
from citizen.home import spend
from shared import door, locks
from shared.atomic import CorruptFile, append_line, read_json, read_jsonl, write_json

BOMB_LINE = "[" * 100_000


@pytest.fixture
def swap_at_fchmod(tmp_path: Path) -> Iterator[list[str]]:
    """Arms a fault point at the writer's first chmod: before it runs, the temp file is
    replaced by a link to `victim` (what a citizen watching its folder with inotify
    does; here deterministic, through an audit hook). Yields what was swapped."""
    victim = tmp_path / "victim"
    victim.write_text("root's own")
    victim.chmod(0o600)
    swapped: list[str] = []

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "os.chmod" or swapped or not armed:
            return
        target, dir_fd = args[0], args[2] if len(args) > 2 else -1
        if isinstance(target, int):  # fchmod: find the temp file by its descriptor
            name = Path(f"/proc/self/fd/{target}").readlink()
        elif dir_fd in (None, -1):
            name = Path(target)
        else:
            name = Path(f"/proc/self/fd/{dir_fd}").readlink() / target
        if ".tmp" in name.name:
            name.unlink()
            name.symlink_to(victim)
            swapped.append(str(name))

    armed = True
    sys.addaudithook(hook)  # hooks cannot be removed: disarmed at the end instead
    try:
        yield swapped
    finally:
        armed = False


def test_a_temp_file_swapped_for_a_link_never_changes_the_links_target(
        tmp_path: Path, swap_at_fchmod: list[str]) -> None:
    """Root rang a citizen's doorbell with write_json(owner=...): temp file, close, then
    os.chmod(tmp) and os.chown(tmp) by name. A link swapped in before the chmod made a
    root-only 0600 file the citizen's 0660 (tried on a server: 10 wins in 10). Through
    the descriptor, the target keeps its mode."""
    folder = tmp_path / "doorbell"
    folder.mkdir()
    write_json(folder / "ring.json", {"wake_type": "TASK"}, mode=0o660)
    assert swap_at_fchmod, "the fault point never fired: the attack was not made"
    assert (tmp_path / "victim").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "victim").read_text() == "root's own"


def test_a_folder_swapped_for_a_link_is_not_written_through(tmp_path: Path) -> None:
    """The citizen renames its doorbell folder away and puts a link to /etc (here: a
    folder of root's) in its place: root then created the citizen's files there."""
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (tmp_path / "doorbell").symlink_to(elsewhere)
    with pytest.raises(door.NotPlain, match="symbolic link"):
        write_json(tmp_path / "doorbell" / "ring.json", {}, owner=(os.getuid(), os.getgid()))
    assert list(elsewhere.iterdir()) == []


def test_a_link_anywhere_below_the_trusted_top_is_not_followed(tmp_path: Path) -> None:
    """A home's `tasks` made a link to a peer's: with `beneath=` the home, no component
    below it is followed."""
    home, peer = tmp_path / "opus", tmp_path / "mira"
    (peer / "tasks" / "queue").mkdir(parents=True)
    home.mkdir()
    (home / "tasks").symlink_to(peer / "tasks")
    with pytest.raises(door.NotPlain):
        write_json(home / "tasks" / "queue" / "t.json", {}, beneath=tmp_path)
    assert list((peer / "tasks" / "queue").iterdir()) == []


@pytest.mark.parametrize("planted", ["bomb", "giant", "fifo", "link"])
def test_a_planted_history_line_blocks_no_reader(tmp_path: Path, planted: str) -> None:
    """weight_history.jsonl is appended by every citizen: a line of 100,000 `[` raised
    RecursionError, `truncate -s 1T` MemoryError, in every reader - root's approve and
    reject included; a FIFO hung it; a link read root's file. Read through the door, the
    good lines survive and the reader returns."""
    path = tmp_path / "weight_history.jsonl"
    append_line(path, {"citizen": "opus", "delta": 0.1}, mode=0o664)
    if planted == "bomb":
        with path.open("a") as f:
            f.write(BOMB_LINE + "\n")
        append_line(path, {"citizen": "mira", "delta": 0.2}, mode=0o664)
        assert [r["citizen"] for r in read_jsonl(path)] == ["opus", "mira"]
        return
    if planted == "giant":
        os.truncate(path, 1 << 40)  # a sparse terabyte: no disk, all of a reader's memory
        assert read_jsonl(path) == []
        return
    path.unlink()
    if planted == "fifo":
        os.mkfifo(path)
    else:
        secret = tmp_path / "secret.jsonl"
        secret.write_text('{"root": "only"}\n')
        path.symlink_to(secret)
    with pytest.raises(door.NotPlain):
        read_jsonl(path)


def test_a_parser_bomb_or_a_giant_state_file_is_a_corrupt_file_not_a_crash(
        tmp_path: Path) -> None:
    """read_json raised RecursionError and MemoryError (not CorruptFile), which no
    caller catches."""
    bomb, giant = tmp_path / "bomb.json", tmp_path / "giant.json"
    bomb.write_text(BOMB_LINE)
    giant.write_text("{}")
    os.truncate(giant, 1 << 40)
    for path in (bomb, giant):
        with pytest.raises(CorruptFile):
            read_json(path)
    shallow_but_deep = tmp_path / "deep.json"
    shallow_but_deep.write_text("[" * (door.MAX_JSON_DEPTH + 1) + "]" * (door.MAX_JSON_DEPTH + 1))
    with pytest.raises(CorruptFile, match="nested deeper than 64"):
        read_json(shallow_but_deep)
    fine = tmp_path / "fine.json"
    fine.write_text("[" * door.MAX_JSON_DEPTH + "]" * door.MAX_JSON_DEPTH)
    assert read_json(fine) is not None


def test_a_gzip_bomb_inflates_no_further_than_its_cap(tmp_path: Path) -> None:
    """A wake log a citizen compressed itself: 1 MB that inflates to a gigabyte."""
    bomb = tmp_path / "1.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        chunk = b"\0" * (1 << 20)
        for _ in range(1024):
            f.write(chunk)
    assert bomb.stat().st_size < 2 << 20
    with pytest.raises(door.TooBig):
        door.gunzip_capped(bomb, 4 << 20, 64 << 20)
    small = tmp_path / "2.jsonl.gz"
    small.write_bytes(gzip.compress(b'{"event": "wake_end"}\n'))
    assert door.gunzip_capped(small, 4 << 20, 64 << 20) == b'{"event": "wake_end"}\n'


def test_a_peers_sparse_ledger_breaks_no_daily_cap_check(civ: Path) -> None:
    """The daily-cap check reads every peer's spend ledger before each call: one sparse
    1 TB ledger raised MemoryError in every peer's model calls."""
    mira = paths.home("mira")
    ledger = spend.ledger(mira, spend.today())
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.write_text('{"cost_usd": 0.5}\n')
    os.truncate(ledger, 1 << 40)
    daily = spend.Daily(paths.home("opus"), citizen_cap=5.0, civilization_cap=100.0,
                        peers=[mira])
    daily.check(0.01)  # no MemoryError: the giant's last 16 MiB are summed, as nothing
    assert spend.spent(mira, spend.today()) == 0.0
    assert spend.lines(mira, spend.today()) == []


def _hold(lock: Path, *, shared: bool) -> subprocess.Popen[bytes]:
    """Another process holding `lock` through a read-only descriptor (`flock -s`)."""
    flag = "-s" if shared else "-x"
    holder = subprocess.Popen(["flock", flag, str(lock), "sh", "-c", "echo held; sleep 600"],
                              stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


def test_the_daemon_lock_is_the_citizens_alone(civ: Path) -> None:
    """~/.daemon.lock was 0640: `flock -s` needs only read access, so a peer's shared
    lock made the victim's daemon fail AlreadyRunning for ever. It is 0600 now (mode
    repaired on the next start)."""
    home = paths.home("opus")
    home.daemon_lock.write_text("")
    home.daemon_lock.chmod(0o640)  # as an older release left it
    with instance.take(home):
        assert home.daemon_lock.stat().st_mode & 0o777 == 0o600


def test_a_lock_held_only_by_another_user_is_replaced(
        civ: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that opened the lock while it was readable keeps its descriptor after the
    mode is fixed: the daemon finds its lock held by another uid only, and takes a new
    file. (The other uid is simulated: in dev mode every citizen is one user; the booted
    test uses real ones.)"""
    home = paths.home("opus")
    home.daemon_lock.write_text("")
    peer = _hold(home.daemon_lock, shared=True)
    try:
        real = locks.holders
        monkeypatch.setattr(instance, "holders",
                            lambda fd: [(pid, uid + 1) for pid, uid in real(fd)])
        with instance.take(home):
            assert str(os.getpid()) == home.daemon_lock.read_text()
        monkeypatch.setattr(instance, "holders", real)
        own = _hold(home.daemon_lock, shared=False)  # its own second daemon: refused
        try:
            with pytest.raises(instance.AlreadyRunning):
                instance.take(home)
        finally:
            own.kill()
            own.wait()
    finally:
        peer.kill()
        peer.wait()


def test_a_citizens_own_log_locks_where_no_peer_can_open(tmp_path: Path) -> None:
    """A wake log or ledger is 0640 and its appends locked the file itself: a peer that
    may read it held `flock -x` and the citizen's next append waited for ever. Its own
    files lock a 0600 `.appends.lock` now, which the peer cannot open."""
    log = tmp_path / "1-REFLECT.jsonl"
    append_line(log, {"event": "wake_start"})
    peer = _hold(log, shared=False)
    try:
        done = threading.Event()

        def write() -> None:
            append_line(log, {"event": "x"})
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        writer.join(timeout=30)
        assert done.is_set(), "the append waited on a peer's lock"
    finally:
        peer.kill()
        peer.wait()
    assert (tmp_path / ".appends.lock").stat().st_mode & 0o777 == 0o600
    assert [r["event"] for r in read_jsonl(log)] == ["wake_start", "x"]


def test_a_fifo_at_a_log_fails_the_appender_at_once(tmp_path: Path) -> None:
    """Opening a FIFO for writing waits for a reader: planted where a history is
    appended, it hung the writer."""
    fifo = tmp_path / "history.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=r"plain file|No such device"):  # NotPlain or ENXIO
        append_line(fifo, {"x": 1}, mode=0o664)


def test_a_ledger_line_that_lies_breaks_no_total(civ: Path) -> None:
    """`citizen cost` and the Money page sum every citizen's ledger: a line of mira's
    with `"tokens_in": "many"`, a list, or a cost that is no number raised ValueError
    or AttributeError for everyone's totals."""
    mira, opus = paths.home("mira"), paths.home("opus")
    spend.record(opus, cost_usd=0.5, tokens_in=100)
    ledger = spend.ledger(mira, spend.today())
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.write_text('{"cost_usd": "lots", "tokens_in": "many"}\n[1, 2]\n'
                      '{"cost_usd": 0.25, "tokens_out": 7}\n')
    rows = {r["citizen"]: r for r in spend.totals([opus, mira], 1, ("citizen",))}
    assert (rows["opus"]["usd"], rows["opus"]["tokens_in"]) == (0.5, 100)
    assert (rows["mira"]["usd"], rows["mira"]["calls"], rows["mira"]["tokens_in"],
            rows["mira"]["tokens_out"]) == (0.25, 2, 0, 7)


def test_a_records_parser_bomb_or_a_linked_thread_folder_is_read_as_nothing(
        tmp_path: Path) -> None:
    """records.read caught CorruptFile and OSError, not RecursionError: a vote of 100,000
    `[` a peer planted crashed every reader of its thread (root's approve included). A
    thread's folder is its opener's: swapped for a link, root read another folder's
    records as this thread's."""
    from shared import records
    from shared.threads import Threads

    root = tmp_path / "records"
    root.mkdir()
    (root / "t1").mkdir()
    (root / "t1" / "vote-opus.json").write_text(BOMB_LINE)
    assert records.read(root / "t1" / "vote-opus.json", None, enforce=False) is None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "header.json").write_text('{"author": "mira"}')
    (root / "prop-2").symlink_to(elsewhere)
    threads = Threads(root, "prop", "header.json", top=tmp_path, enforce=False,
                      pattern=re.compile(r"prop-\d+"))
    with pytest.raises(door.NotPlain):
        threads.header("prop-2")
    assert threads.read("prop-2", "header.json") is None


def test_a_peer_holding_the_weight_historys_lock_parks_no_scheduler_job(
        civ: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The daily diversity job (the scheduler runs it for everyone) waited on the weight
    history's lock (0660: any citizen opens, so holds it) without a deadline: a peer's
    `flock` parked it for good. It waits at most APPEND_WAIT_S, logs, and returns."""
    from citizen import civilization
    from shared.consensus import diversity

    monkeypatch.setattr(diversity, "APPEND_WAIT_S", 0.2)
    history = civilization.commons().consensus.weights.history_path
    history.parent.mkdir(parents=True, exist_ok=True)
    lock = locks.lock_path(history)
    lock.touch()
    peer = _hold(lock, shared=False)
    try:
        civilization.keep_diverse()  # returns: the job is not parked
    finally:
        peer.kill()
        peer.wait()
    assert "weight diversity enforcement failed" in caplog.text
    assert "held by another process" in caplog.text
