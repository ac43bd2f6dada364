"""`citizen tool`: run any registered tool as a citizen (for operators and scripts)."""

from __future__ import annotations

import json

import click

from citizen import config
from citizen.cli.options import citizen_argument
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from citizen.tools import ToolFailure, core_tools
from citizen.tools.base import ToolEnv
from citizen.tools.dynamic import dynamic_tools
from shared.errors import SharedError


@click.command("tool")
@citizen_argument
@click.argument("tool_name", metavar="TOOL")
@click.argument("args", default="{}")
def tool_cmd(name: str, tool_name: str, args: str) -> None:
    """Run tool TOOL as citizen NAME with JSON ARGS and print its result.

    \b
    Examples:
      citizen tool opus read_file '{"path": "contexts/identity.json"}'
      citizen tool opus memory_search '{"query": "lock"}'
    """
    # Every tool, the operator's unconfigured ones too: each says what it lacks.
    tools = {**dynamic_tools(config.load_citizen(name)),
             **core_tools(mail=True, code=True, search=True)}
    if tool_name not in tools:
        raise click.ClickException(f"no tool '{tool_name}' - known: {', '.join(sorted(tools))}")
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"ARGS is not JSON: {exc}") from exc
    from citizen.llm.structured import schema_problem  # noqa: PLC0415 - jsonschema: ≈90 ms

    problem = schema_problem(tools[tool_name].schema, parsed)
    if problem:
        raise click.ClickException(f"ARGS do not match {tool_name}'s schema: {problem}")
    home = paths.home(name)
    paths.require_owner(home)
    cfg = config.load_citizen(name)
    store = ContextStore(home.contexts, cfg.context_limits, estimate_tokens)
    contexts = store.load_all()
    tasks = TaskQueue(home.tasks)
    env = ToolEnv(home, cfg, config.load_secrets(name), tasks, Memory(home.memory), contexts,
                  task=tasks.active())
    try:
        click.echo(tools[tool_name].run(env, parsed))
    except (ToolFailure, SharedError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        store.save_all(contexts)
