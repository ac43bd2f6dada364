"""A task corpus with checkers that do not trust the citizen's report (issue 16).

    .venv/bin/python bench/tasks.py                       # (a) the competent agent behind
                                                          #     the Messages API, real SDK
    .venv/bin/python bench/tasks.py --provider scripted   # (a) the same agent in-process
    .venv/bin/python bench/tasks.py --provider local      # (b) the embedded model
    .venv/bin/python bench/tasks.py --url http://host:port/v1 [--only NAME …]   # (c) a server

Each task runs in a fresh civilization through real TASK wakes (up to `wakes` of them),
then a mechanical checker looks at the home. Per run: tasks the checker passed, tasks
the citizen *claimed* done that the checker failed (false "done": must be 0), calls,
estimated tokens, dollars at the primary model's price, wall time and each failure's
cause. The scripted agent behaves as a real one does: it reads back after editing,
re-runs tests after a fix, polls until something changes, and writes a big file in
parts; its next step depends on what its tools returned, so a stale result or a cut
command changes what it does. The corpus, its steps and checkers: bench/task_corpus.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.task_corpus import TASKS, Step, Task, not_done, say
from citizen.llm.base import Reply, Request, estimate_tokens

__all__ = ["TASKS", "Outcome", "Task", "run_task"]

ITERATIONS = 4  # per wake, for a model (not the scripted agent)


@dataclass
class Outcome:
    name: str
    passed: bool
    claimed_done: bool
    why: str
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read: int = 0
    cost_usd: float = 0.0
    skipped: str = ""
    seconds: float = 0.0
    state: str = ""
    failures: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ agents and runner


def read_deliverables(prompt: str) -> dict[str, Any]:
    """The deliverables a careful reader finds: each `command` the task quotes (run in
    the folder it names with "in X/"), and whether it asks a question."""
    task = prompt.split("The task:\n", 1)[-1].split("\n\n- files:", 1)[0]
    folder = re.search(r"\bin (\w+)/", task)
    commands = [{"run": c, "cwd": folder.group(1) if folder else ""}
                for c in re.findall(r"`([^`]+)`", task)]
    return {"files": [], "commands": commands, "answer": "?" in task}


class Competent:
    """The scripted agent: routing and tool choice by rule, the work by the task's steps,
    each step seeing the tool results of this wake."""

    def __init__(self, steps: list[Step | Reply]) -> None:
        self.steps = list(steps)
        self.requests: list[Request] = []
        from citizen.llm.scripted import ScriptedProvider

        self.provider = ScriptedProvider(default=self._answer)

    def _answer(self, request: Request) -> Reply:
        if request.purpose == "route":
            return say(json.dumps({"tier": "primary"}))
        if request.purpose == "task_deliverables":  # read like a careful reader would
            return say(json.dumps(read_deliverables(str(request.messages[0]["content"]))))
        if request.purpose == "verify_task":  # the verifier is another role: it passes
            return say(json.dumps({"verdict": "pass", "reason": "the evidence shows it"}))
        if request.purpose == "select_tools":
            offered = request.output_schema["properties"]["tools"]["items"]["enum"]  # type: ignore[index]
            wanted = ["read_file", "write_file", "append_file", "str_replace_file",
                      "shell_command", "web_fetch", "task_progress", "task_complete",
                      "task_stuck"]
            return say(json.dumps({"tools": [n for n in wanted if n in offered]}))
        results = [b.get("content", "") for m in request.messages if isinstance(m["content"], list)
                   for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
        instruction = str(request.messages[0]["content"])
        while self.steps:
            step = self.steps.pop(0)
            reply = step(results, instruction) if callable(step) else step
            if reply is not None:
                return reply
        return say("nothing more to do")


OPUS, OPERATOR = "opus@experience.local", "operator@example.org"


class Mailed:
    """A real Dovecot for a mail task: the task arrives as mail from an allowed sender,
    and the check reads the reply in the sender's thread."""

    def __init__(self, text: str) -> None:
        from email.message import EmailMessage
        from email.utils import make_msgid

        from citizen.config import paths
        from tests.mailserver import new_mail_system

        self.mx = new_mail_system()
        home = paths.home("opus")
        with home.env.open("a") as fh:
            fh.write(self.mx.env(OPUS))
        cfg = json.loads(home.config.read_text())
        cfg["mail"] = {"allowed_senders": [OPERATOR]}
        home.config.write_text(json.dumps(cfg))
        self.original = EmailMessage()
        self.original["From"], self.original["To"] = OPERATOR, OPUS
        self.original["Subject"] = "A task for you"
        self.original["Message-ID"] = make_msgid(domain="example.org")
        self.original.set_content(text)
        self.mx.send(self.original, OPERATOR, OPUS)

    def take(self) -> str:
        """The task id the intake made of the mail."""
        from citizen import config
        from citizen.config import paths
        from citizen.mail.intake import Intake

        intake = Intake(paths.home("opus"), config.load_citizen("opus"), {})
        (outcome,) = intake.poll()
        if outcome.action != "task":
            raise RuntimeError(f"the mail did not become a task: {outcome}")
        return str(outcome.detail)

    def reply(self) -> str:
        """The reply in the thread, as text ("" if there is none)."""
        from email import message_from_bytes, policy

        from imapclient import IMAPClient

        from tests.mailserver import USERS

        with IMAPClient("127.0.0.1", port=self.mx.imap_port, ssl=False) as client:
            client.login(OPERATOR, USERS[OPERATOR])
            client.select_folder("INBOX")
            for data in client.fetch(client.search("ALL"), ["BODY.PEEK[]"]).values():
                msg = message_from_bytes(data[b"BODY[]"], policy=policy.default)
                if msg["In-Reply-To"] == self.original["Message-ID"]:
                    return str(msg.get_content())
        return ""

    def stop(self) -> None:
        import shutil

        self.mx.stop()
        shutil.rmtree(self.mx.dir, ignore_errors=True)


def mail_unavailable() -> str:
    from tests.mailserver import unavailable

    return unavailable() or ""


def _metered(out: Outcome, log_path: Path) -> None:
    """Calls, tokens and dollars as the wake log recorded them (the provider's figures)."""
    from citizen.home import wakelog

    calls = [e for e in wakelog.read(log_path) if e["event"] == "llm_call"]
    out.calls += len(calls)
    out.tokens_in += sum(int(e.get("tokens_in", 0)) for e in calls)
    out.tokens_out += sum(int(e.get("tokens_out", 0)) for e in calls)
    out.cache_read += sum(int(e.get("cache_read", 0)) for e in calls)
    out.cost_usd += sum(float(e.get("cost_usd", 0.0)) for e in calls)


def _configure(provider: str, url: str, api: Any) -> None:
    """Point opus's wakes at the provider under test."""
    from citizen.config import paths

    if provider == "local":
        # The demo's small limits: the embedded model writes ≈12 tokens/s under a grammar.
        cfg = paths.home("opus").config
        data = json.loads(cfg.read_text())
        data["budget"] = {"max_usd_per_wake": 1.0, "max_iterations": ITERATIONS,
                          "max_output_tokens": 256}
        cfg.write_text(json.dumps(data))
        if url:
            os.environ["EXPERIENCE_LOCAL_URL"] = url
        os.environ["EXPERIENCE_PROVIDER"] = "local"
    elif provider == "api":
        from tests.anthropic_server import API_KEY

        os.environ.update(ANTHROPIC_API_KEY=API_KEY, ANTHROPIC_BASE_URL=api.url,
                          EXPERIENCE_PROVIDER="anthropic")


def _wake(provider: str, steps: list[Step | Reply], api: Any, out: Outcome) -> None:
    """One TASK wake, its calls and tokens added to `out`."""
    from citizen.wake.flow import run_wake

    if provider == "scripted":
        agent = Competent(steps)
        result = run_wake("opus", wake_type="TASK", provider=lambda c, s: agent.provider)
        out.calls += len(agent.provider.requests)
        out.tokens_in += sum(estimate_tokens(json.dumps(r.to_dict(), default=str))
                             for r in agent.provider.requests)
    else:
        if provider == "api":
            from tests.anthropic_server import Behind

            api.responder = Behind(Competent(steps).provider)
        result = run_wake("opus", wake_type="TASK")
        _metered(out, result.log_path)
    if result.status not in ("ok", "idle"):
        out.failures.append(f"wake ended {result.status}: {result.reason[:120]}")


def run_task(task: Task, provider: str, url: str = "", api: Any = None,
             before_cleanup: Callable[[Path], None] | None = None) -> Outcome:
    """One task in a fresh civilization. provider: "scripted" (the competent agent,
    in-process), "api" (the same agent behind the Messages API server `api`, reached by
    the real SDK), or "local" (the embedded model, or the server at `url`)."""
    from citizen.admin import founding
    from citizen.config import paths
    from citizen.home.tasks import TaskQueue

    if task.mail and mail_unavailable():
        return Outcome(task.name, False, False, "", skipped=mail_unavailable())
    saved = dict(os.environ)
    mailed: Mailed | None = None
    with tempfile.TemporaryDirectory(prefix=f"bench-task-{task.name}-") as root:
        os.environ["CIV_ROOT"] = root
        founding.init(["opus", "mira", "aria"])
        home = paths.home("opus").dir
        _configure(provider, url, api)
        task.setup(home)
        queue = TaskQueue(paths.home("opus").tasks)
        out = Outcome(task.name, False, False, "")
        started = time.monotonic()
        try:
            if task.mail:
                mailed = Mailed(task.text)
                task_id = mailed.take()
            else:
                task_id = queue.add(task.text).id
            for steps in task.wakes if provider != "local" else [[]] * 3:
                if task.background:
                    task.background(home)
                _wake(provider, steps, api, out)
                if queue.where(task_id) in ("done", "failed"):
                    break
            out.seconds = time.monotonic() - started
            out.state = queue.where(task_id) or "?"
            final = queue.load(out.state, task_id) if out.state != "?" else None
            result_text = mailed.reply() if mailed else (final.result if final else "")
        finally:
            if mailed is not None:
                mailed.stop()
            os.environ.clear()
            os.environ.update(saved)
        out.claimed_done = out.state == "done"
        why = task.check(home, result_text)
        if before_cleanup is not None:  # e.g. bench/broker.py reads the broker's ledger
            before_cleanup(home)
    if task.check is not_done:
        why = "claimed done an impossible task" if out.claimed_done else ""
    out.passed = not why and (out.claimed_done or task.check is not_done)
    out.why = why or ("" if out.passed else f"ended {out.state}: {result_text[:120]}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", choices=("scripted", "api", "local"), default="api",
                        help="api: the competent agent behind the Messages API test server, "
                             "through the real SDK (default); scripted: the same agent "
                             "in-process; local: the embedded model")
    parser.add_argument("--url", default="", help="an OpenAI-compatible server (with local)")
    parser.add_argument("--only", nargs="*", default=None, help="task names to run")
    args = parser.parse_args()
    provider = "local" if args.url else args.provider
    chosen = [t for t in TASKS if args.only is None or t.name in args.only]
    api = None
    if provider == "api":
        from tests.anthropic_server import MessagesServer

        api = MessagesServer().start()
    try:
        outcomes = [run_task(t, provider, args.url, api) for t in chosen]
    finally:
        if api is not None:
            api.stop()
    for o in outcomes:
        if o.skipped:
            print(f"SKIP {o.name:<12} {o.skipped}")
            continue
        print(f"{'PASS' if o.passed else 'FAIL'} {o.name:<12} {o.state:<7} "
              f"{o.calls:>3} calls {o.seconds:6.2f} s  {o.why}"
              + (f"  [{'; '.join(o.failures)}]" if o.failures and not o.passed else ""))
    from citizen import config

    ran = [o for o in outcomes if not o.skipped]
    false_done = [o.name for o in ran if o.claimed_done and not o.passed]
    where = f"{provider} {args.url}".strip()
    print(f"\n{where}: {sum(o.passed for o in ran)}/{len(ran)} passed by the checker; "
          f"false 'done': {len(false_done)} {false_done or ''}")
    tokens, out_tokens = sum(o.tokens_in for o in ran), sum(o.tokens_out for o in ran)
    cached = sum(o.cache_read for o in ran)
    if provider == "scripted":
        price = config.templates().prices["claude-opus-4-6"]
        dollars = (tokens * price.input + out_tokens * price.output) / 1e6
        how = "estimated from the requests, at claude-opus-4-6 prices"
    elif provider == "api":
        dollars = sum(o.cost_usd for o in ran)
        how = "as the API server counted them; dollars metered at the council's Claude prices"
    else:
        price = config.templates().prices["claude-opus-4-6"]
        dollars = (tokens * price.input + out_tokens * price.output) / 1e6
        how = "as the model counted them; dollars as if at claude-opus-4-6 prices"
    print(f"calls {sum(o.calls for o in ran)}, {tokens} tokens in, {out_tokens} out, "
          f"{cached} cache read ({how}): ${dollars:.2f}; "
          f"{sum(o.seconds for o in ran):.1f} s")


if __name__ == "__main__":
    main()
