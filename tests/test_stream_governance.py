"""A room's governance is the operator's: in server mode only root's settings file (or a
room-from-before's document while it is root's) sets a preset, silences, boosts or pauses;
a citizen that rewrites the shared room document, or plants a settings file, changes none
of it - and still heats the room."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.streams import Streams
from shared.streams.governance import SETTINGS_DIR

CITIZEN = "nobody"  # a real Unix user that is not this process: the citizen
UID, GID = pwd.getpwnam(CITIZEN).pw_uid, pwd.getpwnam(CITIZEN).pw_gid
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acts as another user")
FORGED = {"preset": "balanced", "changes": {"silenced": ["root"], "paused": True,
                                            "boosted": [[CITIZEN, 0.5]]}}


@pytest.fixture
def top() -> Iterator[Path]:
    """A commons the citizen reaches (pytest's tmp_path is root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="governance-"))
    top.chmod(0o755)  # the citizen must reach the streams below
    (top / "streams").mkdir()
    # 1777: stands for the installer's 3775 root:citizens (nobody is in no such group)
    (top / "streams").chmod(0o1777)
    yield top
    shutil.rmtree(top)


def as_citizen(top: Path, act: Callable[[Streams], Any]) -> None:
    """Run `act` in a process of the citizen's own (its daemon, on a server)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(GID)
            os.setuid(UID)
            act(Streams(top, ["root", CITIZEN], enforce_identity=True))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the citizen's process failed"


def rewrite_governance(streams: Streams) -> None:
    """The citizen heats the room, then writes itself a governance into its document."""
    streams.heat("general", "human")
    streams.rooms.document("general").update(lambda data: data.update(FORGED))


def group_writable(streams: Streams) -> None:
    """rooms/ and its documents are group `citizens`' to write: 0777/0666 stand for it
    (nobody is in no such group)."""
    streams.rooms.dir.chmod(0o2777)
    for path in streams.rooms.dir.iterdir():
        path.chmod(0o666)


def ungoverned(streams: Streams, max_responders: int) -> None:
    s = streams.settings("general")
    assert (s.silenced, s.paused, s.boosted) == ((), False, ())
    assert s.max_responders == max_responders


@pytest.mark.parametrize("operator_first", [False, True])
def test_a_citizen_rewriting_the_room_document_silences_pauses_and_boosts_nothing(
        top: Path, operator_first: bool) -> None:
    streams = Streams(top, ["root", CITIZEN], enforce_identity=True)
    if operator_first:  # before: the citizen's document would win (it was the one store)
        streams.set_room("general", max_responders=1)
        streams.heat("general", "present")  # rooms/ is root's then, as the installer's
        group_writable(streams)
    as_citizen(top, rewrite_governance)
    ungoverned(streams, 1 if operator_first else 2)  # balanced: 2
    room = streams.room("general")
    assert room["temperature"] > 0.5  # the citizen's heat counted
    assert streams.rooms.silence_history("general") == []


def test_roots_set_governs_and_a_citizen_still_heats_the_room(top: Path) -> None:
    streams = Streams(top, ["root", CITIZEN], enforce_identity=True)
    as_citizen(top, lambda s: s.heat("general", "human"))  # it makes rooms/, as on a server
    streams.set_room("general", silenced=[CITIZEN], paused=True)
    group_writable(streams)
    before = streams.room("general")["temperature"]
    as_citizen(top, lambda s: s.heat("general", "human"))
    assert streams.room("general")["temperature"] > before
    s = streams.settings("general")
    assert (s.silenced, s.paused) == ((CITIZEN,), True)  # its heat kept root's governance
    assert streams.rooms.document("general").path.stat().st_uid == UID


def test_the_settings_file_counts_only_when_root_wrote_it(top: Path) -> None:
    streams = Streams(top, ["root", CITIZEN], enforce_identity=True)
    settings_dir = top / "streams" / SETTINGS_DIR
    settings_dir.mkdir(mode=0o755)
    path = settings_dir / "general.json"
    path.write_text(json.dumps({"schema_version": 1, "preset": "strict", "changes": {}}))
    assert streams.settings("general").require_unanimity  # root's strict: it counts
    os.chown(path, UID, -1)  # a citizen's
    assert not streams.settings("general").require_unanimity  # ignored: the defaults
    os.chown(path, 0, -1)
    os.chown(settings_dir, UID, -1)  # a directory the citizen made: it could swap files
    assert not streams.settings("general").require_unanimity
    streams.set_room("general", preset="strict")  # root sets it aside and writes its own
    assert streams.settings("general").require_unanimity
    assert settings_dir.stat().st_uid == 0


def test_a_room_from_before_keeps_its_governance_while_root_owns_it(top: Path) -> None:
    streams = Streams(top, ["root", CITIZEN], enforce_identity=True)
    streams.heat("general", "human")
    doc = streams.rooms.document("general")
    doc.update(lambda data: data.update(  # as the operator's `set` wrote it before
        {"preset": "strict", "changes": {"silenced": [CITIZEN]}}))
    assert streams.settings("general").silenced == (CITIZEN,)
    os.chown(doc.path, UID, -1)  # a citizen rewrote it since: it may have forged it
    assert streams.settings("general").silenced == ()
    dev = Streams(top, ["root", CITIZEN], enforce_identity=False)
    assert dev.settings("general").silenced == (CITIZEN,)  # dev mode: one user, as before
    os.chown(doc.path, 0, -1)
    streams.set_room("general", max_responders=2)  # the first set moves it
    assert "preset" not in json.loads(doc.path.read_text())
    s = streams.settings("general")
    assert (s.require_unanimity, s.silenced, s.max_responders) == (True, (CITIZEN,), 2)
