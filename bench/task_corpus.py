"""The task corpus of bench/tasks.py (issue 16): each task's text, the scripted agent's
steps per wake, the setup of its home, and the mechanical checker that looks at the home
afterwards and does not trust the citizen's report."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citizen.llm.base import Reply, ToolCall, Usage

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
