"""`citizen demo` with a key runs on Claude through the broker (issue 44, item 4): the
same three daemons, their tasks, then opus's code change announced by its own model,
tested and reported by its peers' REVIEW wakes, adopted and merged - no review task
queued. The model is the project's Messages API stand-in, scripted as a capable model
answers; the daemons, wakes, broker, sandboxed test runs and git are real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from citizen.cli import demo
from citizen.tools import sandbox
from tests.anthropic_server import API_KEY, MessagesServer, text, tool_use
from tests.daemons import routing

pytestmark = pytest.mark.skipif(sandbox.problem() != "", reason="bubblewrap cannot run here")
TOOLS = ("write_file", "shell_command", "code_announce", "task_complete")
# What a capable model does with the demo's change task: the README line, a commit, the
# announcement (the demo's EVOLVE text asks exactly this).
EVOLVING = [
    ("shell_command", {"command": f"echo '{demo.EVOLVED}' >> code/README.md && "
                                  "git -C code commit -qam 'demo change'"}),
    ("code_announce", {"description": f"README.md ends with '{demo.EVOLVED}'",
                       "expected_outcome": "the README says it evolved; the tests pass"}),
]


def capable(body: dict[str, Any]) -> dict[str, Any]:
    """A capable model's answers: the structured questions as a careful reviewer answers
    them; a task's steps in order, by what the task asks."""
    answer = routing(body, lambda t: t in TOOLS)
    if answer is not None:
        return answer
    if not body.get("tools"):
        return text("Nothing needs doing now.")
    asked = " ".join(str(m["content"]) for m in body["messages"] if m["role"] == "user")
    done = sum(1 for m in body["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result")
    if demo.EVOLVED in asked:
        plan = EVOLVING
    else:
        path = re.search(r"notes/\w+\.md", asked)
        plan = [("write_file", {"path": path[0], "content": "Done, as the task asked.\n"})
                ] if path else []
    if done < len(plan):
        return tool_use(*plan[done])
    return tool_use("task_complete", {"summary": "did what the task asked"})


def test_the_demo_with_a_key_takes_a_change_to_the_baseline_on_claudes_wakes(
        tmp_path: Path, messages_api: MessagesServer) -> None:
    messages_api.responder = capable
    env = {k: v for k, v in os.environ.items()
           if k not in ("CIV_ROOT", "EXPERIENCE_PROVIDER", "EXPERIENCE_OPERATOR_DIR")}
    env.update(ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL=messages_api.url)
    root = tmp_path / "civ"
    run = subprocess.run([sys.executable, "-m", "citizen", "demo", "--root", str(root),
                          "--wakes", "3", "--interval", "2"], env=env, text=True,
                         capture_output=True, timeout=900, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "on Claude through the dev-mode broker" in out, out
    assert "the embedded model did not announce" not in out, out  # its model announced
    assert re.search(r"by opus: merged; .*merged into the baseline as [0-9a-f]{12}", out), out
    assert demo.EVOLVED in (root / "shared" / "baseline" / "README.md").read_text()
    # Claude's calls went through the broker: the stand-in saw them, with the broker's key.
    assert messages_api.forwarded(), "no call reached the Messages API"
    reviews = [line for line in out.splitlines() if "REVIEW wakes:" in line]
    assert reviews, out  # the peers' own REVIEW wakes, rung by the announcement
