"""The `citizen` command: one click group, one module per command group.

Nothing imported here may import a model SDK: `citizen --help`, `status` and other
commands that make no model call must stay fast (`import anthropic` alone is ≈2 s).
The top layer: it may import every other package of `citizen`; nothing imports it.
"""

from __future__ import annotations

import copy
import ctypes
import importlib
import logging
import os
import sys
from typing import Any

import click

from citizen import __version__
from citizen.cli import terminal
from citizen.cli.terminal import NoSuch
from shared.errors import NotFound

_PR_SET_DUMPABLE = 4  # <linux/prctl.h>

# name -> "module:function". Loaded on first use, so `citizen status` never pays for the
# scheduler, the wake machinery or a model SDK (goal: status in under 300 ms).
COMMANDS = {
    "init": "citizen.cli.init:init",
    "status": "citizen.cli.status:status",
    "cost": "citizen.cli.cost:cost",
    "logs": "citizen.cli.logs:logs",
    "task": "citizen.cli.task:task",
    "wake": "citizen.cli.wake:wake",
    "run": "citizen.cli.run:run",
    "tool": "citizen.cli.tool:tool_cmd",
    "memory": "citizen.cli.memory:memory",
    "mail": "citizen.cli.mail:mail_group",
    "demo": "citizen.cli.demo:demo",
    "onboard": "citizen.cli.onboard:onboard",
    "doctor": "citizen.cli.doctor:doctor",
    "ask": "citizen.cli.ask:ask",
    "proposal": "citizen.cli.consensus:proposal",
    "debate": "citizen.cli.debate:debate",
    "stream": "citizen.cli.stream:stream",
    "room": "citizen.cli.stream:room",
    "backup": "citizen.cli.backup:backup",
    "restore": "citizen.cli.backup:restore",
    "broker": "citizen.cli.broker:broker",
    "spend": "citizen.cli.broker:spend",
    "disk": "citizen.cli.disk:disk",
    "web": "citizen.cli.web:web",
    "remote": "citizen.cli.remote:remote",
    "civilization": "citizen.cli.civilization:civilization",
}
# name -> its short help, its docstring's first sentence: `citizen --help` lists every
# command without importing one (importing them all took half a second). A command
# missing here is loaded for its line; tests/test_cli_errors.py holds each to its own.
SUMMARIES = {
    "init": (
        "Create the commons, citizen homes (all template citizens unless NAMES are given), "
        "the baseline repository of this checkout and each citizen's ~/code as its clone."),
    "status": "Show each citizen: daemon state, last and next wake, tasks, wakes and $ today.",
    "cost": (
        "Dollars, calls, tokens in/out, cache read/write, the cached share and the prompt "
        "tokens an average call carries, per group."),
    "logs": "A table of citizen NAME's wakes, the transcript of one, or a live tail.",
    "task": "Add, list, show, cancel and retry a citizen's tasks.",
    "wake": "Run one wake of citizen NAME now and print how it ended.",
    "run": (
        "Run the daemon of citizen NAME in the foreground (systemd runs this), or with --all "
        "every citizen's daemon in one process."),
    "tool": "Run tool TOOL as citizen NAME with JSON ARGS and print its result.",
    "memory": "A citizen's hierarchical memory.",
    "mail": "A citizen's mailbox.",
    "demo": (
        "Run opus, mira and aria as daemons for a few wakes: a task each, then opus's code "
        "change announced, reviewed by its peers' own wakes, adopted and merged."),
    "onboard": "Create citizen NAME end to end: user, home, code clone, config, .env, unit.",
    "doctor": "Check config, paths, permissions and the model with one tiny real call.",
    "ask": "Ask the model one question and print the reply, tokens and cost.",
    "proposal": "Thought World proposals: list, show, start, approve, reject, report.",
    "debate": "Structured debates: list, start, show, follow, graders.",
    "stream": (
        "ThoughtStream: say (open a stream), list and show decisions, reopen, replay, rate,"
        " calibration; rooms under `citizen room`."),
    "room": "A room's governance and temperature.",
    "backup": "Snapshots of every home and the commons (restic; DEPLOY.md §6).",
    "restore": "Put a snapshot back where it was taken (stop the daemons first).",
    "broker": "The broker: the process that holds the keys, the caps and the ledger.",
    "spend": "What the broker let through: dollars per citizen and day, from its ledger.",
    "disk": "Each citizen's disk budget (budget.max_home_mb in the operator's rules).",
    "web": "The operator's dashboard: every citizen, its wakes and money, live.",
    "remote": (
        "The shared repositories' one remote: the baseline and the world for several "
        "servers."),
    "civilization": (
        "One civilization on several servers: the database they share, and who lives "
        "where."),
}
# The names before the noun groups, kept (hidden, with a note on stderr) for one release:
# old name -> (what to type now, "module:function").
ALIASES = {
    "proposals": ("proposal list", "citizen.cli.consensus:proposals"),
    "approve": ("proposal approve", "citizen.cli.consensus:approve"),
    "reject": ("proposal reject", "citizen.cli.consensus:reject"),
    "consensus": ("proposal start|report", "citizen.cli.consensus:consensus"),
    "debates": ("debate list", "citizen.cli.debate:debates_cmd"),
    "say": ("stream say", "citizen.cli.stream:say_cmd"),
    "decisions": ("stream list|show|replay|rate|calibration", "citizen.cli.stream:decisions"),
}


def _load(target: str) -> click.Command:
    module, _, attr = target.partition(":")
    command: click.Command = getattr(importlib.import_module(module), attr)
    return command


def _alias(old: str, new: str, command: click.Command) -> click.Command:
    """`command` under its old name: hidden from help, and saying what replaced it."""
    alias = copy.copy(command)
    alias.hidden = True

    def invoke(ctx: click.Context) -> Any:
        click.echo(f"note: `citizen {old}` is now `{terminal.command(new)}`; the old name "
                   "goes in the next release", err=True)
        return type(command).invoke(alias, ctx)

    alias.invoke = invoke  # type: ignore[method-assign]
    return alias


class _Group(click.Group):
    """Loads subcommands lazily, and turns every error into one line that names the fix."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's list of commands, from SUMMARIES: no command module is imported."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = []
        for name in COMMANDS:
            summary = SUMMARIES.get(name)
            if summary is None:
                loaded = self.get_command(ctx, name)
                summary = loaded.get_short_help_str(1000) if loaded is not None else ""
            # click's own shortening, on a stand-in that carries only the summary
            rows.append((name, click.Command(name, help=summary).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in ALIASES:
            new, target = ALIASES[cmd_name]
            return _alias(cmd_name, new, _load(target))
        found = COMMANDS.get(cmd_name)
        return _load(found) if found else None

    def invoke(self, ctx: click.Context) -> Any:
        # What the person typed after the group's own options: the command a hint repeats.
        typed = [*ctx._protected_args, *ctx.args]
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit,
                KeyboardInterrupt):
            raise  # click's own: usage errors (2), our NoSuch (2) and messages (1)
        except BrokenPipeError:
            raise  # `citizen logs -f | head`: click exits quietly when the reader is gone
        except Exception as exc:
            if ctx.params.get("verbose", 0) >= 2:
                raise  # -vv: the traceback, for a bug report
            from citizen.cli import errors  # noqa: PLC0415 - the config it imports: 45 ms
            if isinstance(exc, NotFound):  # a proposal, debate, change... that is not there
                raise NoSuch(errors.one_line(exc, typed)) from exc
            raise click.ClickException(errors.one_line(exc, typed)) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="citizen")
# readable=False: a root this user may not read is the error path's to explain (sudo).
@click.option("--root", type=click.Path(file_okay=False, readable=False), envvar="CIV_ROOT",
              help="Civilization root (default $CIV_ROOT, else /home).")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(root: str | None, verbose: int) -> None:
    """Experience: persistent AI citizens on one server.

    \b
    Examples:
      citizen init --root /tmp/civ           create opus, mira and aria (dev mode)
      citizen --root /tmp/civ task add opus "Write notes/hi.md"
      citizen --root /tmp/civ run opus       the daemon (systemd runs this)
      citizen --root /tmp/civ status
      citizen --root /tmp/civ logs opus --wake 1
      citizen doctor                         check config, paths and the model
      citizen demo                           three daemons on the embedded model
    """
    if root:
        os.environ["CIV_ROOT"] = root  # every path derives from this one variable
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    # Commands log to stderr so that stdout stays clean for --json.
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")




def main() -> None:
    """Console-script entry point."""
    # Same umask as the systemd unit: peers may read what a citizen creates but never
    # write it (shared documents set group-write modes explicitly); others get nothing.
    os.umask(0o027)
    undumpable()
    cli()


def undumpable() -> None:
    """Make this process undumpable (PR_SET_DUMPABLE 0): its /proc files - environ, mem,
    maps - then belong to root, so a command a citizen's model runs as the same user
    cannot read the API key out of the daemon or the wake that holds it. Also: no core
    dumps of a process with secrets in memory. Linux only; elsewhere nothing happens."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no prctl
        return
