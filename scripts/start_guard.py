#!/usr/bin/env python3
"""Start guard of a citizen's daemon (systemd ExecStartPre): undo a self-edit that
keeps the daemon from starting.

Runs before Python imports the citizen's own code, so it uses the standard library
only and never imports `citizen`. Each start counts one attempt in
`~/.start_attempts`; the daemon clears it when it reaches READY. After three starts
that never got there, `~/code` is reset to the last-known-good commit recorded in
`~/state.json` (the broken commit is kept on a `broken/<sha>` branch).

    start_guard.py /home/opus
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

LIMIT = 3


def git(code: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(code), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def main(home: Path) -> int:
    attempts_file = home / ".start_attempts"
    attempts = int(attempts_file.read_text() or 0) if attempts_file.exists() else 0
    attempts += 1
    attempts_file.write_text(str(attempts))
    if attempts <= LIMIT:
        return 0
    try:
        good = json.loads((home / "state.json").read_text())["marks"].get("last_known_good")
    except (OSError, ValueError, KeyError):
        good = None
    code = home / "code"
    broken = git(code, "rev-parse", "HEAD")
    if not good or good == broken:
        print(f"start guard: {attempts - 1} failed starts and no other known-good commit",
              file=sys.stderr)
        return 0
    git(code, "branch", "-f", f"broken/{broken[:12]}", broken)
    git(code, "reset", "--hard", good)
    with (home / "logs" / "rollbacks.jsonl").open("a") as fh:
        fh.write(json.dumps({"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                             "from": broken, "to": good,
                             "reason": f"the daemon failed to start {LIMIT} times"}) + "\n")
    attempts_file.write_text("0")
    print(f"start guard: rolled {code} back from {broken[:12]} to {good[:12]}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
