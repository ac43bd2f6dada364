#!/usr/bin/env python3
"""Start guard of a citizen's daemon (systemd ExecStartPre): undo a self-edit that
keeps the daemon from starting.

Runs before Python imports the citizen's own code, so it never imports `citizen` or
anything from `~/code`: git runs through `shared.gitsafe` of the root-owned release
(`/opt/experience/release`; in a checkout, the checkout's own) - with a fixed
configuration, no hooks, fsmonitor or filters - because the citizen's sandboxed shell
can write `~/code/.git/config` and hooks, and this runs outside that sandbox.

Each start counts one attempt in `~/.start_attempts`; the daemon clears it when it
reaches READY. After three starts that never got there, `~/code` is reset to the
last-known-good commit recorded in `~/state.json` (the broken commit is kept on a
`broken/<sha>` branch).

    start_guard.py /home/opus
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

LIMIT = 3
RELEASE = Path("/opt/experience/release")  # root's: what the guard may import


def _gitsafe() -> Any:
    for where in (RELEASE, Path(__file__).resolve().parent.parent):
        if (where / "shared" / "gitsafe.py").is_file():
            sys.path.insert(0, str(where))
            break
    from shared import gitsafe  # noqa: PLC0415 - from the release found above

    return gitsafe


def git(code: Path, *args: str) -> str:
    return str(_gitsafe().out(code, *args))


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
