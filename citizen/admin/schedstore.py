"""The server scheduler's own store (docs/architecture.md §7): its slot counters, its log
of idle wakes, its status of every citizen, and the requests it hands wake units.

None of it is in a home. The scheduler runs as its own user and reads homes as a peer
may; writing into a home as another user is what symlink attacks are made of, so what it
must remember lives here, in directories no citizen can write:
`/var/lib/experience-scheduler` (StateDirectory, 0750: root reads it for `citizen
status`) and `/run/experience-scheduler/wake` (0700: each request is read by systemd for
the citizen's unit, `LoadCredential=`, and by nobody else). In dev mode (`citizen run
--all --scheduler`) both are under `$CIV_ROOT/.scheduler`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from citizen.config import paths
from shared.atomic import Appender, CorruptFile, read_json, read_jsonl, write_bytes, write_json
from shared.identity import server_mode

USER = "experience-scheduler"  # its own system user (setup_server.sh): the release's word
UNIT = "experience-scheduler.service"
STATE_DIR = Path("/var/lib/experience-scheduler")
RUN_DIR = Path("/run/experience-scheduler")
_STATUS: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}
IDLE_KEEP_BYTES = 256 * 1024  # an idle log past this keeps its newer half: bounded for weeks


class Store:
    """The scheduler's files; `state` persists, `run` holds the requests of this boot."""

    def __init__(self, state: Path | None = None, run: Path | None = None) -> None:
        here = os.environ.get("EXPERIENCE_SCHEDULER_DIR")
        if here:
            default_state, default_run = Path(here) / "state", Path(here) / "run"
        elif server_mode(paths.shared_dir()):
            default_state, default_run = STATE_DIR, RUN_DIR
        else:
            default_state = paths.civ_root() / ".scheduler" / "state"
            default_run = paths.civ_root() / ".scheduler" / "run"
        self.state = state or default_state
        self.run = run or default_run

    def make(self) -> None:
        # 0750/0700: the citizens (group `citizens`, not ours) can neither write the
        # counters nor read another's request; on a server systemd made them already.
        for d in (self.state / "slots", self.state / "idle"):
            d.mkdir(mode=0o750, parents=True, exist_ok=True)
        (self.run / "wake").mkdir(mode=0o700, parents=True, exist_ok=True)

    # ------------------------------------------------------------ slots

    def next_slot(self, name: str) -> int:
        """Hand out citizen `name`'s next slot number, durably before it is used: after a
        kill -9 the count goes on, and no slot (no mandatory wake type) is handed twice."""
        path = self.state / "slots" / f"{paths.check_name(name)}.json"
        try:
            slot = int(read_json(path, schema_version=1)["next"])
        except FileNotFoundError:
            slot = 0
        write_json(path, {"schema_version": 1, "next": slot + 1}, mode=0o640)
        return slot

    # ------------------------------------------------------------ idle wakes

    def idle_log(self, name: str) -> Path:
        return self.state / "idle" / f"{paths.check_name(name)}.jsonl"

    def log_idle(self, name: str, record: dict[str, Any]) -> None:
        """One idle wake, logged here (never in the home); the log stays bounded."""
        path = self.idle_log(name)
        with Appender(path, 0o640) as out:
            out.append(record)
        if path.stat().st_size > IDLE_KEEP_BYTES:
            kept = read_jsonl(path)
            write_bytes(path, b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n"
                                       for r in kept[len(kept) // 2:]), mode=0o640)

    def last_idle(self, name: str) -> dict[str, Any] | None:
        """The newest idle wake logged for `name` (None: none, or unreadable)."""
        try:
            records = read_jsonl(self.idle_log(name), tail_bytes=4096)
        except OSError:
            return None
        return records[-1] if records and isinstance(records[-1], dict) else None

    # ------------------------------------------------------------ status

    @property
    def status_file(self) -> Path:
        return self.state / "status.json"

    def write_status(self, citizens: dict[str, dict[str, Any]]) -> None:
        """Every citizen's line at once: one file for a thousand, not a thousand files."""
        write_json(self.status_file, {"schema_version": 1, "pid": os.getpid(),
                                      "citizens": citizens}, mode=0o640, sync_dir=False)

    def status(self) -> dict[str, Any] | None:
        """The scheduler's last status (None: no scheduler has run, or it is unreadable)."""
        try:
            info = self.status_file.stat()
            key = (info.st_mtime_ns, info.st_size, info.st_ino)
            cached = _STATUS.get(self.status_file)
            if cached is not None and cached[0] == key:
                return cached[1]  # `citizen status` asks once per citizen: read once
            data = read_json(self.status_file, schema_version=1)
        except (OSError, CorruptFile):
            return None
        if not isinstance(data, dict):
            return None
        _STATUS[self.status_file] = (key, data)
        return data

    # ------------------------------------------------------------ mail

    def mail_seen(self) -> dict[str, int]:
        """Each citizen's INBOX UIDNEXT when the scheduler last asked (a restart goes on
        from there: mail that came meanwhile still wakes its citizen)."""
        try:
            data = read_json(self.state / "mail.json", schema_version=1)
        except (FileNotFoundError, CorruptFile):
            return {}
        seen = data.get("uidnext", {})
        return {k: v for k, v in seen.items() if isinstance(v, int)} \
            if isinstance(seen, dict) else {}

    def write_mail_seen(self, seen: dict[str, int]) -> None:
        write_json(self.state / "mail.json", {"schema_version": 1, "uidnext": seen},
                   mode=0o640, sync_dir=False)

    # ------------------------------------------------------------ requests

    def request(self, name: str) -> Path:
        return self.run / "wake" / f"{paths.check_name(name)}.json"

    def write_request(self, name: str, request: dict[str, Any]) -> Path:
        """What the next `citizen-wake@NAME` runs; 0600: read by systemd alone (for the
        unit's credential), never by another citizen."""
        path = self.request(name)
        write_json(path, {"schema_version": 1, **request}, mode=0o600, sync_dir=False)
        return path
