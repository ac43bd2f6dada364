"""A hostile citizen against a person's decisions (issue 42, findings 2 and 8): what it
appends to a shared history, plants among the proposals' views, or links in place of a
request or a room document must neither block root's `citizen proposal approve|reject`
(and the approval helper, and the decision pages), nor steer the queue, nor lead root to
read or write through a link. Each test performs the attack; each failed on the code
before its fix (the docstrings say how)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from citizen.web.facts import decisions
from shared import layout
from shared.consensus import Consensus, listing
from shared.consensus import view as views
from shared.debates import Debates
from shared.layout import Layout
from shared.locks import lock_path
from shared.streams import rooms as rooms_mod
from shared.streams.rooms import Rooms
from tests.thoughtworld import HELLO, commons, proposal, vote
from tests.web_world import commons as civ_commons
from tests.web_world import waiting

DEEP = b"[" * 100_000  # json.loads: RecursionError
CANARY = "root-only-canary-7f3a"
CITIZEN_UID = 4242  # a citizen's Unix user, as root sees it (no name needed)


@pytest.fixture
def c(tmp_path: Path) -> Consensus:
    return commons(tmp_path / "shared")


def waiting_for_a_human(c: Consensus, task: str = HELLO) -> str:
    """A high-stakes proposal the council approved: it runs only on a person's word."""
    d = c.request(task, "opus", "operator")
    c.propose(d.id, "opus", proposal(tool="delete_file", path="README.md", content=""))
    c.verify(d.id, d.roles["verifier"], vote())
    assert c.integrate(d.id, d.roles["integrator"], vote()).phase == "human"
    return d.id


def deep_line(path: Path) -> None:
    """A citizen appends one line of 100,000 '[' (the file is group-writable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(DEEP + b"\n")


def sparse_giant(path: Path) -> None:
    """A citizen truncates the history to 1 TB (`truncate -s 1T`): sparse, no disk used."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.truncate(2**40)


ATTACKS: dict[str, Callable[[Path], None]] = {"deep": deep_line, "giant": sparse_giant}


# ---------------------------------------------------------------- finding 2: histories

@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_poisoned_weight_history_blocks_no_human_decision(
        c: Consensus, attack: str, decision: str) -> None:
    """Before: `proposal approve|reject` replayed the whole weight history - RecursionError
    on the deep line, MemoryError on the giant - and no person could decide."""
    pid = waiting_for_a_human(c)
    ATTACKS[attack](Layout(c.shared).weight_history)
    assert [r["id"] for r in listing.waiting_for_human(c)] == [pid]
    d = c.decide_human(pid, "root", decision, "looked at it")
    assert d.human is not None and d.human["decision"] == decision
    assert d.phase == ("execute" if decision == "approve" else "record")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_poisoned_weight_history_is_reported_not_hidden(c: Consensus, attack: str) -> None:
    """The replay goes on without what cannot be read, and says so."""
    ATTACKS[attack](Layout(c.shared).weight_history)
    assert c.weights.current("opus") == c.framework.start("executor")
    if attack == "giant":  # a cap was met: the history is reported as cut
        assert c.weights.problem


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_poisoned_episodes_and_patterns_block_no_step(c: Consensus, attack: str) -> None:
    """Before: the integrator's record step (and every prompt that shows episodes or
    patterns) read `episodes.jsonl`, `patterns.jsonl`, `consensus_history.jsonl` whole."""
    memory = Layout(c.shared).memory
    for name in ("episodes.jsonl", "patterns.jsonl", "consensus_history.jsonl",
                 "episodes_archive.jsonl"):
        ATTACKS[attack](memory / name)
    pid = waiting_for_a_human(c)
    d = c.decide_human(pid, "root", "reject", "no")
    d = c.record(pid, d.roles["integrator"], {"key_learnings": ["reject early"],
                                               "patterns": ["ask first"]})
    assert d.phase == "done"
    assert [p["pattern"] for p in c.patterns.all()] == ["ask first"]
    assert [e["proposal"] for e in c.episodes.relevant("reject")] == [pid]
    assert "ep-" + pid.removeprefix("prop-") in c.episodes.ids()
    assert [h["proposal"] for h in c.episodes.history()] == [pid]
    assert c.precedents("reject")


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_poisoned_debate_log_blocks_no_move(tmp_path: Path, attack: str) -> None:
    """Before: every move replayed `events.jsonl` whole to catch the log up."""
    store = Debates(tmp_path / "shared", ["opus", "mira"], enforce_identity=False)
    d = store.start("Should the library keep deprecated modules?", ["opus", "mira"],
                    "operator")
    ATTACKS[attack](store.threads.dir(d.id) / "events.jsonl")
    assert isinstance(store.events(d.id), list)
    after = store.move(d.id, "opus", {"move": "CLAIM", "content": "Keep them one release."})
    assert after.seq == 1


# ---------------------------------------------------------------- finding 8: the queue

def test_a_planted_view_neither_appears_nor_breaks_the_queue(civ: Path) -> None:
    """Before: a `prop-*.json` planted in proposals/pending made the queue "unreadable"
    (NotFound: no such proposal) and the Decisions page a 500."""
    pid = waiting()
    pending = Layout(civ / "shared").proposals / "pending"
    for name in ("prop-x.json", "prop-20990101T000000-abcd.json"):
        (pending / name).write_text(json.dumps({"id": name[:-5], "status": "pending",
                                                "phase": "human"}))
    queue = decisions.waiting_for_a_person()
    assert ([i["id"] for i in queue["items"]], queue["unreadable"]) == ([pid], [])
    assert [r["id"] for r in decisions.proposals()["pending"]] == [pid]
    assert decisions.proposal_ids() == {pid}


@pytest.mark.parametrize("how", ["moved", "deleted", "replaced"])
def test_a_moved_view_does_not_hide_a_proposal(civ: Path, how: str) -> None:
    """Before: the queue listed proposals/pending; a view moved to rejected/ (the folder
    is group-writable) took the proposal out of the operator's queue."""
    pid = waiting()
    props = Layout(civ / "shared").proposals
    view = props / "pending" / f"{pid}.json"
    if how == "moved":
        view.rename(props / "rejected" / view.name)
    elif how == "deleted":
        view.unlink()
    else:  # a view that says it was decided
        view.write_text(json.dumps({"id": pid, "status": "approved", "phase": "done"}))
    queue = decisions.waiting_for_a_person()
    assert [i["id"] for i in queue["items"]] == [pid]
    assert [r["id"] for r in decisions.proposals()["pending"]] == [pid]
    assert decisions.proposals()["rejected"] == []


def test_a_broken_proposal_is_named_not_blocking_the_queue(civ: Path) -> None:
    """One proposal whose request cannot be read is named in `unreadable`; the others
    stay in the queue."""
    pid = waiting()
    broken = waiting("another task")
    request = Layout(civ / "shared").proposal_records / broken / "request.json"
    request.unlink()
    request.write_bytes(DEEP)
    queue = decisions.waiting_for_a_person()
    assert [i["id"] for i in queue["items"]] == [pid]
    assert [u["source"] for u in queue["unreadable"]] == [f"proposal {broken}"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "giant"])
def test_root_never_reads_a_request_through_a_link_or_unbounded(
        c: Consensus, tmp_path: Path, kind: str) -> None:
    """Before: the request was read by name - through a link to a root-only file (whose
    words then became the proposal's task, in a view every citizen reads), hanging on a
    FIFO, or whole (a sparse giant: MemoryError) - and the decision with it."""
    pid = waiting_for_a_human(c)
    other = waiting_for_a_human(c, "another task")
    request = c.records_dir / other / "request.json"
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"id": other, "task": CANARY, "roles": c.load(other).roles}))
    secret.chmod(0o600)
    request.unlink()
    if kind == "symlink":
        request.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(request)
    else:
        sparse_giant(request)
    c.threads.forget()
    assert [r["id"] for r in listing.waiting_for_human(c)] == [pid]
    d = c.decide_human(pid, "root", "approve", "looked")
    assert d.phase == "execute"
    seen = json.dumps([*c.views(), listing.rows(c)])
    assert CANARY not in seen


def test_root_never_reads_or_writes_a_room_document_through_a_link(tmp_path: Path) -> None:
    """Before: root's presence mark read a room document that links to a root-only file,
    and wrote what it read back out, 0664, for every citizen to read."""
    streams = tmp_path / "shared" / "streams"
    streams.mkdir(parents=True)
    rooms = Rooms(streams / "rooms", streams)
    rooms.heat("general", "present")
    secret = tmp_path / "secret.json"
    body = json.dumps({"schema_version": 1, "temperature": 0.5, "updated":
                       "2026-01-01T00:00:00Z", "secret": CANARY})
    secret.write_text(body)
    secret.chmod(0o600)
    doc = streams / "rooms" / "general.json"
    doc.unlink()
    doc.symlink_to(secret)
    with pytest.raises(OSError, match="link"):
        rooms.heat("general", "present")
    assert secret.read_text() == body and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert CANARY not in json.dumps(rooms.governed("general"))
    with pytest.raises(OSError, match="link"):
        rooms.room("general")


def test_root_never_writes_through_a_rooms_folder_swapped_for_a_link(tmp_path: Path) -> None:
    """Before: the rooms folder moved away and a link in its place led root's write (and
    its lock file) into the link's target."""
    streams = tmp_path / "shared" / "streams"
    streams.mkdir(parents=True)
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (streams / "rooms").symlink_to(elsewhere)
    rooms = Rooms(streams / "rooms", streams)
    with pytest.raises(OSError, match="link"):
        rooms.heat("general", "present")
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------- modes

def test_the_shared_folders_others_write_are_sticky() -> None:
    """Before: proposals/<state> and streams/rooms were 2775: any citizen could move or
    replace a view, or a room document, another had written."""
    modes = dict(layout.DIRS)
    for state in layout.VIEW_STATES:
        assert modes[f"{layout.PROPOSALS}/{state}"] & stat.S_ISVTX
    assert modes[f"{layout.STREAMS}/rooms"] & stat.S_ISVTX
    assert views.VIEW_DIR_MODE & stat.S_ISVTX and rooms_mod.ROOMS_DIR_MODE & stat.S_ISVTX


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's view needs root to make")
@pytest.mark.parametrize("moves", [False, True])
def test_a_view_its_next_writer_cannot_replace_does_not_stop_a_step(
        c: Consensus, tmp_path: Path, moves: bool) -> None:
    """With the sticky bit the next actor may neither replace nor move a view another
    user wrote (root's, after a decision): its step goes on all the same - a view is a
    cache - and the view it could not replace or move is rewritten in place."""
    pid = c.request(HELLO, "opus", "operator").id
    c.propose(pid, "opus", proposal())  # root (this process) rendered the view
    view = c.dir / "pending" / f"{pid}.json"
    view.write_text(json.dumps({"phase": "stale"}))
    for up in (tmp_path, *tmp_path.parents[:2]):  # pytest's 0700 folders: let it pass
        up.chmod(up.stat().st_mode | 0o011)
    for path in (c.shared, c.dir):
        path.chmod(0o755)
    for state in layout.VIEW_STATES:  # sticky, and writable by the other user below
        (c.dir / state).chmod(0o1777)
    view.chmod(0o666)  # group `citizens` may write it; the child is in no group
    lock = lock_path(c.rendered.lock)
    lock.touch()
    lock.chmod(0o666)
    d = c.load(pid)
    if moves:
        d.phase, d.result = "done", "rejected"
    child = os.fork()
    if child == 0:  # another user renders the next view over root's file
        code = 1
        try:
            os.setgid(CITIZEN_UID)
            os.setuid(CITIZEN_UID)
            c.rendered.write(d)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the step failed over a view"
    assert view.stat().st_uid == 0  # root's file, neither replaced nor moved
    assert json.loads(view.read_text())["phase"] == d.phase
    if moves:
        moved = c.dir / "rejected" / f"{pid}.json"
        assert json.loads(moved.read_text())["status"] == "rejected"


def test_the_decision_page_of_a_civilization_with_a_poisoned_history(civ: Path) -> None:
    """The dashboard's queue and proposal page over a poisoned weight history."""
    pid = waiting()
    deep_line(Layout(civ / "shared").weight_history)
    sparse_giant(Layout(civ / "shared").patterns)
    assert [i["id"] for i in decisions.waiting_for_a_person()["items"]] == [pid]
    assert decisions.proposal(pid)["awaits_person"]
    civ_commons().decide_human(pid, "root", "reject", "no")
    assert decisions.waiting_for_a_person()["count"] == 0
