"""Evidence before "done": what a task names must be there when its worker says done.

A worker's "done" is a claim, not a fact (the Thought World seed: no self-evaluation).
When a task is taken, its deliverables are fixed in the task (`meta["deliverables"]`):
the files its text names (a rule, always), and what a fast-tier call reads from it -
more files, commands that must succeed, whether it asks a question - kept only where
the task's own text says so (a model cannot invent a command to run or drop a file the
task names). `task_complete` checks them mechanically - each file exists in the home and
is not empty, each command exits 0 in the sandbox, an asked question gets an answer -
and refuses the claim with what is missing, so the worker can still do it or say it is
stuck. The evidence (files with size and digest, commands with their exit) goes into the
task's result, and so into the reply mail.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from citizen.errors import CitizenError
from citizen.home import wakelog

# A path-like token with an extension: notes/hello.md, report.txt, src/app.py. Not a
# URL, an address or a version number; not `json.dumps` or `os.path` (a token without
# a folder counts only with an extension files have).
_FILE = re.compile(r"(?<![\w/.:@-])((?:[\w-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5})(?![\w/@(-])")
_EXTENSIONS = frozenset((
    "md", "txt", "rst", "py", "json", "jsonl", "yaml", "yml", "toml", "ini", "cfg", "conf",
    "csv", "tsv", "html", "htm", "css", "js", "mjs", "ts", "tsx", "jsx", "sh", "bash", "zsh",
    "sql", "xml", "svg", "png", "jpg", "jpeg", "gif", "pdf", "log", "lock", "env", "c", "h",
    "cc", "cpp", "hpp", "rs", "go", "java", "kt", "rb", "php", "pl", "lua", "r", "tex", "bib",
    "ipynb", "diff", "patch", "out", "dat", "bin", "gz", "tar", "zip",
))
_NOT_FILES = re.compile(r"^(?:e\.g|i\.e|etc|vs)\.", re.IGNORECASE)
MAX_REFUSALS = 3  # claims refused before the task ends `failed` with the reason


def named_files(text: str) -> list[str]:
    """The files a task's text names, in order, once each."""
    found = []
    for match in _FILE.finditer(text):
        token = match.group(1)
        start = match.start(1)
        if text[max(0, start - 3):start].endswith("://") or _NOT_FILES.match(token):
            continue
        if "/" not in token and token.rsplit(".", 1)[1].lower() not in _EXTENSIONS:
            continue
        if token not in found:
            found.append(token)
    return found


def settle(meta: dict[str, Any], text: str,
           read: Callable[[str], dict[str, Any] | None] | None) -> bool:
    """Fix the task's deliverables in `meta` if they are not yet: the rule's files at
    once, what the model reads when it can be asked (until then "read_pending", and no
    claim of done is accepted). True when they are settled."""
    wanted = meta.get("deliverables")
    if wanted is not None and not wanted.get("read_pending"):
        return True
    got = read(text) if read is not None else None
    meta["deliverables"] = deliverables(text, got)
    if read is not None and got is None:
        meta["deliverables"]["read_pending"] = True
        return False
    return True


def deliverables(text: str, read: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a task must leave behind, fixed when it is taken (kept in the task): the
    files its text names, plus what a model `read` from it where the text bears it out."""
    files = named_files(text)
    commands: list[dict[str, str]] = []
    answer = _asks(text)
    if read:
        files += [f for f in read.get("files", ()) if isinstance(f, str) and _in_home(f)
                  and f in text and f not in files]
        quoted = _quoted(text)
        for c in read.get("commands", ()):
            if not isinstance(c, dict):
                continue
            run, cwd = str(c.get("run", "")).strip(), str(c.get("cwd", "")).strip().strip("/")
            if run in quoted and (not cwd or (_in_home(cwd) and cwd in text)):
                commands.append({"run": run, "cwd": cwd})
        answer = answer or bool(read.get("answer"))
    return {"files": files[:8], "commands": commands[:3], "answer": answer,
            "read_by": "rule and model" if read else "rule"}


_QUESTION = re.compile(r"^\s*(what|which|who|when|where|why|how|is|are|does|do|can)\b.*\?",
                       re.IGNORECASE | re.DOTALL)


def _quoted(text: str) -> set[str]:
    """What the task quotes as a command: a `code span`, or a whole line of its own. A
    word inside a sentence ("set DEBUG=true") is not a command to run."""
    spans = {m.strip() for m in re.findall(r"`([^`\n]+)`", text)}
    lines = {line.strip().removeprefix("$ ") for line in text.splitlines()
             if line.strip() and " " in line.strip()}
    return {q for q in spans | lines if q}


def _asks(text: str) -> bool:
    """A task that is a question ("How many ... ?") wants its answer in the reply."""
    return bool(_QUESTION.match(text))


def _in_home(path: str) -> bool:
    parts = Path(path).parts
    return bool(parts) and not Path(path).is_absolute() and ".." not in parts


# (command, cwd under the home) -> (exit code, output): the sandboxed shell.
Runner = Callable[[str, str], tuple[int, str]]
MIN_ANSWER_WORDS = 3  # a reply that asks nothing back but "done" answers no question


# The daemon's own directories: a file there is no task's deliverable.
_NOT_WORK = ("contexts", "memory", "logs", "tasks", "mail")


def _match(home: Path, name: str, touched: list[str]) -> Path | None:
    """The file that delivers `name`: at that path in the home; else one the task wrote
    whose path ends with it (a task asking for hello.txt answered by notes/hello.txt);
    else the one file of that name in the home (written by a command: "change
    README.md in repo/")."""
    root = home.resolve()
    direct = (home / name).resolve()
    if direct.is_relative_to(root) and direct.is_file() and _work(home, name):
        return direct
    for path in reversed(touched):
        if path == name or path.endswith("/" + name):
            candidate = (home / path).resolve()
            if candidate.is_relative_to(root) and candidate.is_file() and _work(home, path):
                return candidate
    found = [p for p in home.rglob(Path(name).name)
             if p.is_file() and not p.is_symlink() and str(p.relative_to(home)).endswith(name)
             and p.relative_to(home).parts[0] not in _NOT_WORK]
    return found[0] if len(found) == 1 else None


def _work(home: Path, name: str) -> bool:
    """A file that can deliver work: no symlink on its way (a link to a context or a
    secret proves nothing), not the daemon's own files, not a hidden one (.env)."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return False
    if rel.parts[0] in _NOT_WORK or any(p.startswith(".") for p in rel.parts):
        return False
    if rel.parts[0] in ("state.json", "config.json"):
        return False
    here = home
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            return False
    return True


def check(home: Path, wanted: dict[str, Any], touched: list[str], *, summary: str = "",
          run: Runner | None = None) -> tuple[list[str], list[str], list[Path]]:
    """(problems, evidence, files): what is missing, a line per deliverable that holds,
    and the files that hold them. Commands run only when a `run`ner is given."""
    problems, evidence, files = [], [], []
    for name in wanted.get("files", ()):
        found = _match(home, str(name), touched)
        if found is None:
            problems.append(f"{name} does not exist in your home")
            continue
        data = found.read_bytes()
        if not data.strip():
            problems.append(f"{name} is empty")
            continue
        digest = hashlib.sha256(data).hexdigest()[:12]
        files.append(found)
        evidence.append(f"{found.relative_to(home.resolve())}: {len(data)} bytes, "
                        f"sha256 {digest}")
    for command in wanted.get("commands", ()):
        if run is None:
            break
        line, where = command["run"], command.get("cwd") or "your home"
        try:
            code, out = run(line, command.get("cwd", ""))
        except CitizenError as exc:
            problems.append(f"`{line}` in {where} could not run: {exc}")
            continue
        if code != 0:
            problems.append(f"`{line}` in {where} exits {code}: {out.strip()[-300:]}")
        else:
            evidence.append(f"`{line}` in {where}: exit 0")
    if wanted.get("answer") and len(summary.split()) < MIN_ANSWER_WORDS:
        problems.append("the task asks a question: your summary must give the answer")
    return problems, evidence, files


def tool_calls(log_path: Path | None) -> list[dict[str, Any]]:
    """The tool calls a wake's log records."""
    if log_path is None or not log_path.is_file():
        return []
    return [e for e in wakelog.read(log_path) if e.get("event") == "tool_call"]


def written(calls: list[dict[str, Any]]) -> list[str]:
    """The files these tool calls wrote, in order, once each: what the wake loop logged
    as `wrote` for a tool that says which argument names the file it writes
    (`Tool.writes`)."""
    return list(dict.fromkeys(str(c["wrote"]) for c in calls
                              if c.get("wrote") and not c.get("error")))


def touched(history: list[dict[str, Any]], log_path: Path | None) -> list[str]:
    """Every file a task wrote: in its earlier wakes (its history) and in this one."""
    out: list[str] = []
    for h in history:
        out += [str(t) for t in h.get("touched", ()) if t not in out]
    return out + [t for t in written(tool_calls(log_path)) if t not in out]
