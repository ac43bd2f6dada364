"""Stakes of a proposal, classified from its actions - never from what the proposer claims.

The seed's table: read, list, search → low (2/3 agree); write, edit, test → medium
(unanimous); delete, deploy, architecture → high (unanimous and a human). A
proposal's stakes are those of its highest action. Anything this module does not
recognise is high: an unknown action - `make`, `npm install`, any script - is exactly
what a human should look at, since what it does cannot be read from the proposal. The
operator may name commands it trusts to be medium (`/etc/experience/stakes.json`,
`{"medium_programs": ["make", "npm test"]}`, root-owned: no citizen can extend it): a
command counts when its words begin with an entry's and the rest are plain words (no
option, path or assignment: `make -f /x`, `make SHELL=…` stay high); programs that
remove, overwrite or escalate (`rm`, `curl`, …) and interpreters stay high whatever
the list says. Listing a build tool hands medium votes whatever the repository's build
runs - a proposal may write the Makefile too; that is the operator's call.

Read-only programs are low only without the options that make them write or run code
(`sort -o`, `sort -uo` - short options cluster -, `sort --compress-program=sh`, `rg --pre`,
`git log --output` and the abbreviations getopt accepts, `--out=`, `find -fprint`, …);
any process substitution or redirection into a file is high. A command names only what
is in the world repository: an absolute path, `~`, `..` or a `$` expansion (a peer's
home, `/etc/experience`) is high whatever the program, and so is a program run by path
(`./cat`, `/tmp/x/cat` are not cat) - issue 28, break 3.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

LEVELS = ("low", "medium", "high")
THRESHOLDS = {"low": "2/3", "medium": "unanimous", "high": "unanimous + human"}

ACTION_TOOLS = ("read_file", "list_files", "search", "write_file", "append_file", "edit_file",
                "run_tests", "delete_file", "run")
_LOW_TOOLS = {"read_file", "list_files", "search"}
_MEDIUM_TOOLS = {"write_file", "append_file", "edit_file"}

# Paths whose change alters the civilization's architecture or its shared baseline.
_ARCHITECTURE = re.compile(
    r"(^|/)(baseline|systemd|scripts|\.git|\.ci)(/|$)|(^|/)(DESIGN|DEPLOY)\.md$"
    r"|(^|/)(pyproject\.toml|setup\.py|values\.yaml)$|(^|/)templates/", re.IGNORECASE)

# Shell programs that only look.
_READ_ONLY = {"ls", "cat", "head", "tail", "grep", "rg", "find", "wc", "pwd", "echo", "stat",
              "file", "diff", "du", "df", "tree", "sort", "uniq", "true"}
_READ_ONLY_GIT = {"status", "log", "diff", "show", "blame", "branch", "ls-files", "rev-parse"}
# git that records work without losing any; anything else (`git config`, `-c`, hooks) is high.
_MEDIUM_GIT = {"add", "commit", "tag", "stash", "merge", "init", "switch"}
_TESTS = {"pytest", "ruff", "mypy"}
# Programs that remove, overwrite, publish or escalate: always a human's call.
_DESTRUCTIVE = {"rm", "rmdir", "mv", "dd", "mkfs", "shred", "truncate", "chmod", "chown",
                "chgrp", "kill", "pkill", "killall", "sudo", "su", "systemctl", "reboot",
                "shutdown", "curl", "wget", "scp", "rsync", "ssh", "useradd", "userdel",
                "crontab", "tee", "sed", "install", "ln", "cp"}
_DESTRUCTIVE_GIT = {"push", "reset", "clean", "rebase", "checkout", "restore", "rm", "mv",
                    "filter-branch", "gc", "prune", "branch-D"}
# Interpreters given code inline: what they do cannot be read from the command line.
_INTERPRETERS = {"python", "python3", "bash", "sh", "zsh", "perl", "ruby", "node", "eval",
                 "exec", "xargs", "env", "awk"}
_SEPARATORS = re.compile(r"&&|\|\||[;|&\n]|\$\(|`")
# Options that make a "read-only" program write a file or run code.
_WRITING_OPTIONS = {"sort": ("-o", "--output", "--compress-program"), "tree": ("-o",),
                    "rg": ("--pre",),
                    "file": ("-C", "--compile"), "git": ("--output",),
                    "find": ("-fprint", "-fls", "-delete", "-exec", "-ok")}
# pytest options that remove directories or load code from elsewhere.
_PYTEST_RISKY = ("--basetemp", "-p", "-c", "--rootdir", "-o", "--override-ini",
                 "--confcutdir", "--pyargs")
# Medium git subcommands, and the arguments that make them lose work.
_GIT_LOSING = {"stash": {"drop", "clear", "pop"}, "tag": {"-d", "--delete", "-f", "--force"},
               "switch": {"-f", "--force", "--discard-changes", "-C", "--force-create"},
               "merge": {"--abort", "-X", "--strategy-option", "-s", "--strategy"}}
_GIT_BRANCH_LISTING = {"-a", "--all", "-r", "--remotes", "-l", "--list", "-v", "-vv",
                       "--show-current", "--contains", "--merged", "--no-merged"}


def _rank(level: str) -> int:
    return LEVELS.index(level)


def highest(levels: Iterable[str]) -> str:
    return max(levels, key=_rank, default="low")


def command_stakes(command: str, medium: frozenset[str] = frozenset()) -> tuple[str, str]:
    """Stakes of a shell command line (its highest command's), and why. `medium`: the
    operator's allow-list of programs that are medium rather than high."""
    if "<(" in command or ">(" in command:
        return "high", "process substitution runs a command the stakes cannot read"
    command = re.sub(r"\d*[<>]&(\d+|-)(?![\w./])", " ", command)  # 2>&1 joins streams
    if ">" in command:
        return "high", "redirects output into a file (overwrites)"
    found = [("low", "reads only")]
    for part in _SEPARATORS.split(command):
        try:
            words = shlex.split(part)
        except ValueError:
            return "high", "a command line that does not parse"
        if words:
            found.append(_program_stakes(words, medium))
            if found[-1][0] == "high":
                return found[-1]
    level = highest(f[0] for f in found)
    return level, next(why for lvl, why in reversed(found) if lvl == level)


def _risky_option(word: str, risky: tuple[str, ...]) -> bool:
    """Whether `word` is one of the `risky` options as getopt would read it: the option
    itself or with its value (`-oF`, `--output=F`), a long one abbreviated (`--out=F`,
    `--comp=sh`), a short one inside a cluster (`-uo F`)."""
    if word.startswith(risky):
        return True
    if word.startswith("--") and len(word) > 2:
        name = word.split("=", 1)[0]
        return any(r.startswith("--") and r.startswith(name) for r in risky)
    letters = {r[1] for r in risky if len(r) == 2}  # -o, -C: getopt letters
    return word.startswith("-") and any(c in letters for c in word[1:])


def _outside(word: str) -> bool:
    """Whether a word names something outside the world repository (a peer's home,
    /etc/experience, the commons) or an expansion the stakes cannot read."""
    value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
    return (value.startswith(("/", "~")) or "$" in value
            or ".." in value.replace("\\", "/").split("/"))


def _writes(prog: str, words: list[str]) -> bool:
    """Whether a read-only program is given an option that writes or runs code."""
    risky = _WRITING_OPTIONS.get(prog, ())
    # find's options are single-dash words (-fprint), never clusters or abbreviations.
    if risky and any(w.startswith(risky) if prog == "find" else _risky_option(w, risky)
                     for w in words[1:]):
        return True
    operands = [w for w in words[1:] if not w.startswith("-")]
    return prog == "uniq" and len(operands) > 1  # uniq IN OUT writes OUT


def _git_stakes(words: list[str]) -> tuple[str, str]:
    sub, args = (words[1] if len(words) > 1 else ""), set(words[2:])
    if sub in _DESTRUCTIVE_GIT or (sub == "branch" and args & {"-D", "-d", "--delete",
                                                              "-f", "--force", "-m", "-M"}):
        return "high", f"git {sub} rewrites or removes history or files"
    if _writes("git", words) or args & _GIT_LOSING.get(sub, set()):
        return "high", f"git {sub} with {' '.join(words[2:])[:60]} loses or writes files"
    if sub == "branch" and args - _GIT_BRANCH_LISTING:
        return "medium", "git branch makes a branch"
    if sub in _READ_ONLY_GIT:
        return "low", f"git {sub} reads only"
    if sub in _MEDIUM_GIT:
        return "medium", f"git {sub}"
    return "high", f"git {sub or '(nothing)'} is not a git command known to be safe"


def _listed(words: list[str], medium: frozenset[str]) -> bool:
    """Whether the operator's list names this command: an entry's words begin it (by
    bare name: ./make or /tmp/x/make is some other program) and the rest are plain
    words - no option, path, assignment or expansion that could change what it runs."""
    for entry in medium:
        head = entry.split()
        if words[:len(head)] == head and all(
                re.fullmatch(r"[A-Za-z0-9_.:@+-]+", w) and not w.startswith("-")
                for w in words[len(head):]):
            return True
    return False


def _program_stakes(words: list[str],  # noqa: PLR0911 - one per kind
                    medium: frozenset[str]) -> tuple[str, str]:
    prog = words[0].rsplit("/", 1)[-1]
    if "/" in words[0]:
        return "high", f"{words[0]} is a program run by its path, whatever its name says"
    if any(_outside(w) for w in words):
        return "high", (f"{prog} names a path outside the world repository (a peer's "
                        "home, /etc/experience) or an expansion")
    if prog == "git":
        return _git_stakes(words)
    if (prog in _WRITING_OPTIONS or prog == "uniq") and _writes(prog, words):
        return "high", f"{prog} with an option that writes a file or runs code"
    if prog in _DESTRUCTIVE:
        return "high", f"{prog} removes, overwrites, publishes or escalates"
    is_pytest = prog == "pytest" or (prog.startswith("python") and words[1:3] == ["-m",
                                                                                    "pytest"])
    if is_pytest and any(w.startswith(_PYTEST_RISKY) for w in words[1:]):
        return "high", "pytest with an option that removes directories or loads other code"
    if is_pytest:
        return "medium", "runs tests"
    if prog in _INTERPRETERS or prog.startswith("python"):
        return "high", f"{prog} runs code that cannot be read from the command line"
    if prog in _TESTS:
        return "medium", "runs tests"
    if prog in _READ_ONLY:
        return "low", f"{prog} reads only"
    if _listed(words, medium):
        return "medium", f"{prog} is on the operator's list of medium commands"
    return "high", (f"{prog} is an unknown program: what it does cannot be read from the "
                    "proposal (an operator can list it as medium in stakes.json)")


def action_stakes(action: Mapping[str, Any],  # noqa: PLR0911
                  medium: frozenset[str] = frozenset()) -> tuple[str, str]:
    """Stakes of one action `{"tool": …, "args": {…}}`, and why."""
    tool = str(action.get("tool", ""))
    args = action.get("args") or {}
    path = str(args.get("path", "")) if isinstance(args, Mapping) else ""
    if tool in _LOW_TOOLS:
        return "low", f"{tool} reads only"
    if tool in _MEDIUM_TOOLS:
        if _ARCHITECTURE.search(path):
            return "high", f"{tool} changes {path}, part of the baseline or architecture"
        return "medium", f"{tool} changes {path or 'files'}"
    if tool == "delete_file":
        return "high", f"deletes {path or 'a file'}"
    if tool in ("run", "run_tests"):
        command = str(args.get("command", "")) if isinstance(args, Mapping) else ""
        level, why = command_stakes(command, medium)
        if tool == "run_tests" and level == "low":
            return "medium", f"runs tests ({why})"
        return level, why
    return "high", f"unknown action '{tool}' (known: {', '.join(ACTION_TOOLS)})"


def classify(actions: Iterable[Mapping[str, Any]],
             medium: frozenset[str] = frozenset()) -> tuple[str, list[str]]:
    """A proposal's stakes (its highest action's) and the reason for each action."""
    rated = [action_stakes(a, medium) for a in actions]
    if not rated:
        return "low", ["no actions"]
    return highest(r[0] for r in rated), [f"{lvl}: {why}" for lvl, why in rated]


def threshold_met(stakes: str, approvals: int, voters: int) -> bool:
    """Whether `approvals` of `voters` citizens meet the stakes' threshold (humans aside)."""
    if stakes == "low":
        return approvals * 3 >= voters * 2
    return approvals == voters
