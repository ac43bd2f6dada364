"""Mail latency: from a mail's delivery to its task's wake starting, with IDLE and polling.

    .venv/bin/python bench/mail_latency.py [--mails N]     (root: it runs Dovecot)

A real daemon, a real Dovecot and SMTP hub on loopback; the model is the local
Messages API test server (the wake's model time is not part of the figure).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import show  # noqa: E402


def measure(idle: bool, poll_seconds: float, mails: int) -> list[float]:
    from citizen.admin import founding
    from citizen.config import paths
    from citizen.home import wakelog
    from tests.anthropic_server import MessagesServer
    from tests.daemons import daemon_env, heartbeat, start, wait_for, worker
    from tests.mailserver import new_mail_system
    from tests.test_mail import OPERATOR, OPUS, mail

    root = Path(tempfile.mkdtemp(prefix="bench-mail-"))
    os.environ["CIV_ROOT"] = str(root)
    founding.init(["opus"])
    mx = new_mail_system()
    api = MessagesServer().start()
    api.responder = worker
    home = paths.home("opus")

    def fresh_logs(before: set[Path]) -> set[Path]:
        return set(wakelog.wake_logs(home)) - before

    def finished(log: Path) -> bool:
        return str(wakelog.summary(log)["status"]) != "running"

    with home.env.open("a") as fh:
        fh.write(mx.env(OPUS))
    cfg = json.loads(home.config.read_text())
    cfg["mail"] = {"allowed_senders": [OPERATOR], "idle": idle, "poll_seconds": poll_seconds}
    home.config.write_text(json.dumps(cfg))
    proc = start(daemon_env(root, api), "opus", "--interval", "3600", "--first-wake", "3600")
    latencies = []
    try:
        wait_for(lambda: heartbeat(root).get("state") == "sleeping", timeout=30)
        time.sleep(2)  # let IDLE settle
        for i in range(mails):
            before = set(wakelog.wake_logs(home))
            mx.send(mail(f"bench {i}"), OPERATOR, OPUS)  # returns once delivered to Dovecot
            sent = time.perf_counter()
            new = wait_for(partial(fresh_logs, before), timeout=120, every=0.002)
            latencies.append(time.perf_counter() - sent)
            (path,) = new
            wait_for(partial(finished, path), timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        api.stop()
        mx.stop()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mails", type=int, default=10)
    parser.add_argument("--poll-seconds", type=float, default=10.0)
    args = parser.parse_args()
    print("\n# delivery to Dovecot -> the task's wake starts (a real daemon)")
    show("with IMAP IDLE", measure(True, 60.0, args.mails), "ms", 1000)
    show(f"with polling every {args.poll_seconds:.0f} s (IDLE off)",
         measure(False, args.poll_seconds, max(3, args.mails // 2)), "ms", 1000)


if __name__ == "__main__":
    main()
