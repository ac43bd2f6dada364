"""Peer monitoring: deterministic checks of one citizen by another.

Reads only what peers may read (heartbeats in the commons; wake logs and tasks in the
peer's home, group-readable): a dead or stale daemon, a loop across wakes (the same
tool call with the same result wake after wake - polling, whose results change, is
not a loop), nonsensical actions (`check_nonsense`), a stuck task, stalled progress.
Findings are filed under
`shared/monitor/findings/<peer>/` (`Monitor`: one record per report, owned by its
author) and ring the peer's doorbell.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from shared import clock, records
from shared.atomic import CorruptFile, read_jsonl, read_tail

log = logging.getLogger(__name__)

STALE_HEARTBEAT_S = 300  # ten missed beats
STUCK_TASK_S = 6 * 3600
LOOP_WAKES = 3  # the same call with the same result in this many wakes
STALLED_WAKES = 5  # this many work wakes in a row without a good ending
REPEATED_FAILURES = 3  # the same call failing the same way this often is no longer trying
UNKNOWN_TOOLS = 2  # calls of tools that do not exist in the wake
# What is read of a peer's file, at most: a heartbeat is ~300 bytes, a wake log rarely
# past 1 MB (its end is what the checks need). The peer may plant a sparse file of any
# size, and the reader may be the server's scheduler, whose memory is every citizen's.
MAX_BEAT_BYTES, MAX_LOG_BYTES = 65536, 4 * 2**20


@dataclass(frozen=True)
class Finding:
    kind: str  # dead, looping, nonsensical, stuck, stalled
    detail: str


def alive(pid: int) -> bool:
    """Whether a process exists (another user's counts: signalling it is refused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def check_heartbeat(path: Path, now: float | None = None) -> list[Finding]:
    """A missing, stale or dead daemon (a cleanly stopped one is not a finding)."""
    now = now or time.time()  # liveness: the wall clock, as the heartbeat is written
    if not path.exists():
        return [Finding("dead", "no heartbeat at all: the daemon has never run")]
    raw = read_tail(path, MAX_BEAT_BYTES)
    try:
        beat = json.loads(raw)
    except ValueError as exc:
        raise CorruptFile(path, f"not valid JSON ({exc})") from exc
    if beat.get("state") in ("stopped", "scheduled"):  # scheduled: the scheduler's to keep
        return []
    age = now - clock.epoch(beat["updated"])
    if not alive(int(beat["pid"])):
        return [Finding("dead", f"daemon pid {beat['pid']} is gone without stopping cleanly")]
    if age > STALE_HEARTBEAT_S and beat.get("state") != "waking":
        return [Finding("dead", f"heartbeat is {int(age)} s old while {beat.get('state')}")]
    return []


def check_wakes(logs: list[Path], work_kinds: tuple[str, ...]) -> list[Finding]:
    """Loops across wakes and stalled progress, from the peer's recent wake logs."""
    findings = []
    seen: dict[str, set[int]] = defaultdict(set)
    results: dict[str, set[str]] = defaultdict(set)
    endings: list[str] = []
    for path in logs:
        events = [e for e in read_jsonl(path, MAX_LOG_BYTES) if isinstance(e, dict)]
        for e in events:
            if e.get("event") == "tool_call":
                key = f"{e['tool']} {json.dumps(e.get('args'), sort_keys=True)}"
                seen[key].add(int(e["wake"]))
                results[key].add(str(e.get("result")))
        end = next((e for e in reversed(events) if e.get("event") == "wake_end"), None)
        kind = path.stem.split("-", 1)[1]
        if end and kind in work_kinds and end.get("status") != "idle":
            endings.append(str(end.get("status")))
    for key, wakes in seen.items():
        if len(wakes) >= LOOP_WAKES and len(results[key]) == 1:
            findings.append(Finding("looping", f"{key[:120]} returned the same result in "
                                    f"{len(wakes)} wakes"))
    recent = endings[-STALLED_WAKES:]
    if len(recent) == STALLED_WAKES and "ok" not in recent:
        findings.append(Finding("stalled", f"the last {STALLED_WAKES} work wakes ended "
                                f"{', '.join(recent)}"))
    return findings


def check_nonsense(logs: list[Path]) -> list[Finding]:
    """Nonsensical actions (seed: Peer Monitoring), by two mechanical signals a careful
    reader of a wake log would call senseless - the seed names the check, not its rule:
    the same tool call with the same arguments failing REPEATED_FAILURES times (a
    model that does not read its errors), and UNKNOWN_TOOLS or more calls of tools the
    wake does not have (acting on tools it imagines). Judgement stays with the model:
    a finding only makes the monitoring citizen look and the peer reflect."""
    failures: dict[str, int] = defaultdict(int)
    unknown: set[str] = set()
    calls = 0
    for path in logs:
        for e in read_jsonl(path, MAX_LOG_BYTES):
            if not isinstance(e, dict) or e.get("event") != "tool_call" or not e.get("error"):
                continue
            if str(e.get("result", "")).startswith(f"error: no tool '{e.get('tool')}'"):
                unknown.add(str(e.get("tool")))
                calls += 1
                continue
            key = f"{e.get('tool')} {json.dumps(e.get('args'), sort_keys=True)}"
            failures[key] += 1
    findings = [Finding("nonsensical", f"{key[:120]} failed {n} times, called unchanged")
                for key, n in failures.items() if n >= REPEATED_FAILURES]
    if calls >= UNKNOWN_TOOLS:
        findings.append(Finding("nonsensical", f"{calls} calls of tools the wake does not "
                                f"have: {', '.join(sorted(unknown))[:120]}"))
    return findings


def check_task(active_dir: Path, now: float | None = None) -> list[Finding]:
    """An active task that has been active for hours."""
    now = now or time.time()  # compared with a file's mtime: the wall clock
    findings = []
    for path in active_dir.glob("t-*.json"):
        age = now - path.stat().st_mtime
        if age > STUCK_TASK_S:
            findings.append(Finding("stuck", f"task {path.stem} has not moved for "
                                    f"{int(age // 3600)} h"))
    return findings


def _whole(report: dict[str, Any]) -> bool:
    """A report its readers can use: a time `clock.epoch` reads, and findings that are
    each a kind and a detail (texts)."""
    try:
        clock.epoch(report.get("ts"))
    except (ValueError, TypeError, AttributeError):
        return False
    found = report.get("findings")
    return isinstance(found, list) and all(
        isinstance(f, dict) and isinstance(f.get("kind"), str)
        and isinstance(f.get("detail"), str) for f in found)


class Monitor:
    """The peer reports of one commons: `<findings>/<peer>/<time>-<author>-<random>.json`,
    each a record of its author's (`shared.records`), read back only if its file is the
    author's (server mode) - a peer cannot file a report in another's name."""

    def __init__(self, findings_dir: Path, enforce_identity: bool) -> None:
        self.dir = findings_dir
        self.enforce = enforce_identity

    def file(self, peer: str, by: str, findings: list[Finding]) -> Path:
        """Record `by`'s report about `peer`; returns its path. Never replaces one: two
        reports in one second are two files (`records.add`)."""
        return records.add(self.dir, self.dir / peer, by, {
            "peer": peer, "ts": clock.now(), "findings": [asdict(f) for f in findings]})

    def about(self, peer: str) -> list[dict[str, Any]]:
        """Every report about `peer` that counts, oldest first, its reporter under
        `records.AUTHOR` (older reports named it `by`); a forged, broken or misplaced
        one is skipped, logged, and kept."""
        folder = self.dir / peer
        out = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            # Why _whole: a report is its author's own file - one that is no report must be
            # skipped here, not raise in every monitor's `recent` and the peer's REFLECT.
            report = records.read(path, None, self.enforce, legacy=("by",),
                                  accept=lambda r: r.get("peer") == peer and _whole(r))
            if report is not None:
                out.append(report)
        return out

    def recent(self, peer: str, within_s: float = 86400) -> int:
        """How many reports with findings were filed about `peer` recently."""
        cutoff = clock.time() - within_s
        return sum(1 for r in self.about(peer)
                   if clock.epoch(r.get("ts")) >= cutoff and r.get("findings"))  # any format
