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
command changes what it does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from citizen.llm.base import Reply, Request, ToolCall, Usage, estimate_tokens

ITERATIONS = 4  # per wake, for a model (not the scripted agent)
Step = Callable[[list[str], str], Reply | None]  # (tool results so far, instruction) -> reply
Check = Callable[[Path, str], str]  # (home, task result) -> "" when it holds, else why


def call(name: str, **args: Any) -> Reply:
    return Reply(text="", model="scripted", provider="scripted", usage=Usage(0, 0),
                 tool_calls=(ToolCall(f"c-{name}", name, args),))


def say(text: str) -> Reply:
    return Reply(text=text, model="scripted", provider="scripted", usage=Usage(0, 0))


def done(summary: str) -> Reply:
    return call("task_complete", summary=summary)


def when(test: Callable[[str], bool], then: Reply, otherwise: Reply) -> Step:
    """A step that looks at the last tool result."""
    return lambda results, _: then if results and test(results[-1]) else otherwise


@dataclass
class Task:
    name: str
    text: str
    check: Check
    wakes: list[list[Step | Reply]]  # the scripted agent's steps, per wake
    setup: Callable[[Path], None] = lambda home: None
    background: Callable[[Path], None] | None = None  # started as the wake begins
    mail: bool = False  # sent by mail from an allowed sender; checked on the threaded reply


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


# ------------------------------------------------------------------ checkers


def has(path: str, content: str) -> Check:
    def check(home: Path, _: str) -> str:
        f = home / path
        if not f.is_file():
            return f"{path} is missing"
        return "" if f.read_text() == content else f"{path} holds {f.read_text()[:60]!r}"
    return check


def runs(command: str, expect: str = "") -> Check:
    def check(home: Path, _: str) -> str:
        done_ = subprocess.run(["bash", "-c", command], cwd=home, capture_output=True,
                               text=True, timeout=60, check=False)
        if done_.returncode != 0:
            return f"`{command}` exited {done_.returncode}: {done_.stderr[-200:]}"
        return "" if expect in done_.stdout else f"`{command}` printed {done_.stdout[:80]!r}"
    return check


def answered(word: str) -> Check:
    return lambda _h, result: "" if word in result else f"the answer lacks {word!r}"


def replied(path: str) -> Check:
    """For a mail task, `result` is the reply found in the sender's thread ("" if none)."""
    def check(home: Path, result: str) -> str:
        if not result:
            return "no reply in the mail's thread"
        return "" if f"{path}: " in result else "the reply does not quote the evidence"
    return check


def not_done(_home: Path, _result: str) -> str:
    return ""  # the runner fails it if the citizen claimed done


# ------------------------------------------------------------------ setups


def write(files: dict[str, str], git: str = "") -> Callable[[Path], None]:
    def setup(home: Path) -> None:
        for rel, text in files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(text)
        if git:
            for cmd in (["git", "init", "-q"], ["git", "config", "user.email", "b@x"],
                        ["git", "config", "user.name", "bench"], ["git", "add", "-A"],
                        ["git", "commit", "-qm", "start"]):
                subprocess.run(cmd, cwd=home / git, check=True, capture_output=True)
    return setup


LONG = " ".join(["The sandbox uses bubblewrap to make namespaces for every command;",
                 "seccomp filters system calls; the unit allows what bubblewrap needs."] * 40)
CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = ("import unittest\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
             "if __name__ == '__main__':\n    unittest.main()\n")
UNITTEST = "cd proj && python3 -m unittest -q 2>&1; echo exit=$?"


def _ready_later(home: Path) -> None:
    def later() -> None:
        time.sleep(1.5)
        (home / "ready.flag").write_text("ready")
    threading.Thread(target=later, daemon=True).start()


def _poll(results: list[str], _: str) -> Reply:
    if results and "ready.flag" in results[-1] and "No such file" not in results[-1]:
        return call("write_file", path="done.txt", content="saw the flag")
    return call("shell_command", command="sleep 0.5; ls ready.flag 2>&1")


# ------------------------------------------------------------------ the corpus

BIG = "".join(f"line {i}\n" for i in range(1, 3001))
TASKS = [
    Task("write", "Write notes/hello.md containing exactly: Hello, world.",
         has("notes/hello.md", "Hello, world."),
         [[call("write_file", path="notes/hello.md", content="Hello, world."),
           call("read_file", path="notes/hello.md"), done("notes/hello.md written")]]),
    Task("append", "Append a line 'two' to log.txt.", has("log.txt", "one\ntwo\n"),
         [[call("read_file", path="log.txt"), call("append_file", path="log.txt",
                                                   content="two\n"),
           call("read_file", path="log.txt"),
           when(lambda r: r.endswith("two\n"), done("log.txt has two"),
                call("task_stuck", reason="the append did not show"))]],
         write({"log.txt": "one\n"})),
    Task("fix_test", "The tests in proj/ fail: fix calc.py so `python3 -m unittest` passes "
         "in proj/.", runs("cd proj && python3 -m unittest -q"),
         [[call("shell_command", command=UNITTEST), call("read_file", path="proj/calc.py"),
           call("str_replace_file", path="proj/calc.py", old="a - b", new="a + b"),
           call("shell_command", command=UNITTEST),
           when(lambda r: "exit=0" in r, done("proj tests pass"),
                call("task_stuck", reason="still failing"))]],
         write({"proj/calc.py": CALC, "proj/test_calc.py": TEST_CALC}, git="proj")),
    Task("rename", "Rename the function old_name to new_name in proj/a.py, proj/b.py and "
         "proj/c.py.", runs("! grep -rq old_name proj && grep -c new_name proj/*.py"),
         [[call("shell_command", command="grep -rl old_name proj"),
           call("shell_command", command="sed -i 's/old_name/new_name/g' proj/a.py proj/b.py "
                "proj/c.py"),
           call("shell_command", command="grep -rn 'old_name\\|new_name' proj"),
           when(lambda r: "old_name" not in r, done("renamed in three files"),
                call("task_stuck", reason="old_name remains"))]],
         write({"proj/a.py": "def old_name():\n    return 1\n",
                "proj/b.py": "from a import old_name\nprint(old_name())\n",
                "proj/c.py": "import a\nX = a.old_name()\n"})),
    Task("summarise", "Summarise long.txt into summary.md in under 600 characters, naming "
         "bubblewrap, seccomp and namespaces.",
         runs("test $(wc -c < summary.md) -lt 600 && grep -q bubblewrap summary.md && "
              "grep -q seccomp summary.md && grep -q namespaces summary.md"),
         [[call("read_file", path="long.txt"),
           call("write_file", path="summary.md", content="Every command runs in bubblewrap, "
                "which makes namespaces for it; seccomp filters its system calls."),
           done("summary.md written")]], write({"long.txt": LONG})),
    Task("answer", "Which city is named in facts.txt? Answer in your summary.",
         answered("Lisbon"),
         [[call("read_file", path="facts.txt"),
           when(lambda r: "Lisbon" in r, done("The city is Lisbon."),
                call("task_stuck", reason="no city found"))]],
         write({"facts.txt": "The meeting is in Lisbon in May.\n"})),
    Task("two_wakes", "Write report.md in two parts, one per wake: 'Part one.' then "
         "' Part two.'", has("report.md", "Part one. Part two."),
         [[call("write_file", path="report.md", content="Part one."),
           call("task_progress", note="part one is in report.md"),
           say("part two next wake")],
          [lambda _r, ins: call("append_file", path="report.md", content=" Part two.")
           if "report.md" in ins else call("task_stuck", reason="I do not know what I did"),
           call("read_file", path="report.md"), done("report.md has both parts")]]),
    Task("impossible", "Download https://data.example.invalid/x.csv into x.csv.", not_done,
         [[call("web_fetch", url="https://data.example.invalid/x.csv"),
           when(lambda r: r.startswith("error"),
                call("task_stuck", reason="the host cannot be reached"),
                done("downloaded"))]]),
    Task("claims_early", "Write notes/plan.md with three steps.",
         runs("test $(wc -l < notes/plan.md) -eq 3"),
         [[done("done: finish"),  # the embedded model's habit: claim first
           call("write_file", path="notes/plan.md", content="1. a\n2. b\n3. c\n"),
           done("notes/plan.md has three steps")]]),
    Task("big_file", "Write big.txt with 3000 lines 'line 1' … 'line 3000'.",
         has("big.txt", BIG),
         [[call("write_file", path="big.txt", content=BIG[:len(BIG) // 3]),
           call("append_file", path="big.txt", content=BIG[len(BIG) // 3:2 * len(BIG) // 3]),
           call("append_file", path="big.txt", content=BIG[2 * len(BIG) // 3:]),
           call("shell_command", command="wc -l big.txt"),
           when(lambda r: "3000" in r, done("big.txt has 3000 lines"),
                call("task_stuck", reason="wrong line count"))]]),
    Task("json", "Write config/settings.json with name 'demo' and port 8080.",
         runs("python3 -c \"import json; d = json.load(open('config/settings.json')); "
              "assert d == {'name': 'demo', 'port': 8080}\""),
         [[call("write_file", path="config/settings.json",
                content=json.dumps({"name": "demo", "port": 8080})),
           call("shell_command", command="python3 -m json.tool config/settings.json"),
           done("config/settings.json written")]]),
    Task("script", "Create hello.py that prints hi, and check that it runs.",
         runs("python3 hello.py", "hi"),
         [[call("write_file", path="hello.py", content="print('hi')\n"),
           call("shell_command", command="python3 hello.py"),
           when(lambda r: "hi" in r, done("hello.py prints hi"),
                call("task_stuck", reason="it does not run"))]]),
    Task("count", "Write the number of lines of data.txt to count.txt.",
         has("count.txt", "137\n"),
         [[call("shell_command", command="wc -l < data.txt"),
           lambda r, _: call("write_file", path="count.txt",
                             content=re.findall(r"\d+", r[-1].split("\n", 1)[1])[0] + "\n"),
           done("count.txt written")]],
         write({"data.txt": "".join(f"{i}\n" for i in range(137))})),
    Task("sort", "Write the lines of names.txt sorted to sorted.txt.",
         has("sorted.txt", "ann\nbob\ncid\n"),
         [[call("shell_command", command="sort names.txt > sorted.txt"),
           call("read_file", path="sorted.txt"), done("sorted.txt written")]],
         write({"names.txt": "cid\nann\nbob\n"})),
    Task("replace", "Replace every 'colour' with 'color' in doc.md.",
         has("doc.md", "color, color and color\n"),
         [[call("shell_command", command="sed -i 's/colour/color/g' doc.md"),
           call("read_file", path="doc.md"), done("doc.md uses color")]],
         write({"doc.md": "colour, colour and colour\n"})),
    Task("files", "Create out/a.txt, out/b.txt and out/c.txt, each holding its letter.",
         runs("test \"$(cat out/a.txt out/b.txt out/c.txt)\" = abc"),
         [[call("shell_command", command="mkdir -p out && for x in a b c; do printf $x > "
                "out/$x.txt; done"),
           call("shell_command", command="cat out/*.txt"), done("three files in out/")]]),
    Task("average", "Write the average score in scores.csv to avg.txt with 2 decimals.",
         has("avg.txt", "7.50\n"),
         [[call("shell_command", command="python3 -c \"import csv; r = list(csv.DictReader("
                "open('scores.csv'))); print(f\\\"{sum(float(x['score']) for x in r) / len(r)"
                ":.2f}\\\")\" > avg.txt"),
           call("read_file", path="avg.txt"), done("avg.txt written")]],
         write({"scores.csv": "name,score\na,5\nb,10\n"})),
    Task("commit", "In repo/, change README.md's title to '# Experience' and commit it.",
         runs("cd repo && git log -1 --format=%s | grep -q . && head -1 README.md | "
              "grep -qx '# Experience' && test -z \"$(git status --porcelain)\""),
         [[call("shell_command", command="cd repo && sed -i '1s/.*/# Experience/' README.md "
                "&& git commit -qam 'Title: Experience' && git log --oneline -1"),
           done("committed the new title")]],
         write({"repo/README.md": "# Old\n"}, git="repo")),
    Task("executable", "Write run.sh that prints ok, and make it executable.",
         runs("./run.sh", "ok"),
         [[call("write_file", path="run.sh", content="#!/bin/sh\necho ok\n"),
           call("shell_command", command="chmod +x run.sh && ./run.sh"),
           done("run.sh prints ok")]]),
    Task("delete_line", "Delete the line 'banana' from list.txt.",
         has("list.txt", "apple\ncherry\n"),
         [[call("shell_command", command="sed -i '/^banana$/d' list.txt"),
           call("read_file", path="list.txt"), done("banana removed")]],
         write({"list.txt": "apple\nbanana\ncherry\n"})),
    Task("poll", "Wait until ready.flag appears in your home, then write done.txt.",
         runs("test -s done.txt"), [[*([_poll] * 8), done("done.txt written")]],
         background=_ready_later),
    Task("mail", "Write notes/thanks.md thanking the operator.", replied("notes/thanks.md"),
         [[call("write_file", path="notes/thanks.md", content="Thank you, operator."),
           call("read_file", path="notes/thanks.md"),
           done("notes/thanks.md thanks the operator")]], mail=True),
]


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
