"""PEER_MONITOR wakes: check one peer; only findings cost a model call.

The checks are deterministic (`shared.monitor`); with nothing found the wake is idle.
Findings are filed in the commons, ring the peer's doorbell (its REFLECT wake reads
them) and, once a peer has drawn OPERATOR_THRESHOLD reports in a day, go to the
operators by mail.
"""

from __future__ import annotations

import json
import random

from citizen import civilization, mail
from citizen.config import paths
from citizen.home import wakelog
from citizen.mail.outbox import flush, queue, request
from citizen.tools.base import ToolEnv
from citizen.wake.types.base import WORK_WAKES, Gate, Setup, WakeType
from shared.monitor import (
    Finding,
    check_heartbeat,
    check_nonsense,
    check_task,
    check_wakes,
)

OPERATOR_THRESHOLD = 3
RECENT_LOGS = 20


class PeerMonitorWake(WakeType):
    name = "PEER_MONITOR"

    def gate(self, setup: Setup) -> Gate:
        peers = [c for c in civilization.commons(setup.templates).citizens
                 if c != setup.home.name]  # the listing the handle keeps (a gate is hot)
        if not peers:
            return Gate(False, "no peers to watch")
        peer = random.Random(setup.number).choice(peers)  # noqa: S311 - whom to watch, not a secret
        home = paths.home(peer)
        try:
            logs = wakelog.wake_logs(home)[-RECENT_LOGS:]
            findings = (check_heartbeat(home.heartbeat) + check_wakes(logs, WORK_WAKES)
                        + check_nonsense(logs) + check_task(home.tasks / "active"))
        except OSError as exc:
            return Gate(False, f"cannot read {peer}'s files ({exc.strerror}); skipped")
        if not findings:
            return Gate(False, f"{peer} looks healthy")
        return Gate(True, f"{peer}: {', '.join(f.kind for f in findings)}",
                    {"peer": peer, "findings": findings})

    def begin(self, setup: Setup, gate: Gate, env: ToolEnv) -> str:
        peer: str = gate.data["peer"]
        findings: list[Finding] = gate.data["findings"]
        me = setup.home.name
        commons = civilization.commons(setup.templates)
        commons.monitor.file(peer, me, findings)
        commons.ring(peer, "REFLECT", f"peer report from {me}", sender=me)
        summary = "; ".join(f"{f.kind}: {f.detail}" for f in findings)
        env.contexts["peer_monitor"].add(f"{peer}: {summary}")
        if commons.monitor.recent(peer) >= OPERATOR_THRESHOLD:
            _tell_operators(setup, env, peer, summary)
        return (setup.templates.wake_prompt(self.name, peer=peer)
                + "\n\nWhat the checks found:\n"
                + json.dumps([f.__dict__ for f in findings], ensure_ascii=False))


def _tell_operators(setup: Setup, env: ToolEnv, peer: str, summary: str) -> None:
    operators = setup.config.mail.allowed_senders
    if not operators or not mail.configured(env.secrets):
        return
    queue(setup.home, request(operators, f"[experience] {peer} needs attention",
                              f"{setup.home.name} has reported problems with {peer} "
                              f"{OPERATOR_THRESHOLD} or more times today. Latest: "
                              f"{summary}\n\nSee: citizen status; citizen logs {peer}\n"),
          "monitor")
    flush(setup.home)
