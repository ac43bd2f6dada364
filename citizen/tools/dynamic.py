"""Dynamic tools: propose, review (the reviewer runs the tests) and call approved ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from citizen import civilization
from citizen.config import CitizenConfig
from citizen.tools import sandbox
from citizen.tools.base import BUILT_IN, Tool, ToolEnv, ToolFailure, tool
from citizen.tools.shell import scrubbed_env
from shared.dyntools import DynTools, Wrap


def registry(config: CitizenConfig) -> DynTools:
    return civilization.commons(approvals=config.library_approvals).tools


def boxed(env: ToolEnv) -> Wrap:
    """A peer's tool code (its tests, its calls) runs in this citizen's sandbox for peer
    code: its home without secrets and read-only (its ~/code and dotfiles above all), only
    the private copy of the code writable, no commons, no network."""
    refused = sandbox.refusal()
    if refused:
        raise ToolFailure(refused)

    def wrap(argv: list[str], private: Path) -> list[str]:
        return sandbox.wrap(env.home, argv, trust=sandbox.Trust.PEER, binds=(private,),
                            chdir=private)

    return wrap


@tool
def tool_propose(env: ToolEnv, *, name: str, description: str, input_schema: str, code: str,
                 tests: str) -> str:
    """Propose a new tool: its code (defining run(**args) -> str) and its pytest tests.

    :param name: the tool's name (lowercase, digits, '_')
    :param description: what it does, for whoever picks tools
    :param input_schema: its arguments as a JSON schema (a JSON object, as text)
    :param code: Python source defining `def run(**args) -> str`
    :param tests: pytest source; it may `import <name>`
    """
    try:
        schema = json.loads(input_schema)
        data = registry(env.config).propose(
            env.home.name, name, description=description, input_schema=schema, code=code,
            tests=tests, reserved=set(BUILT_IN))
    except json.JSONDecodeError as exc:
        raise ToolFailure(str(exc)) from exc
    return f"proposed {data['name']}; peers review it (and run its tests) before it is callable"


@tool
def tool_review(env: ToolEnv, name: str, decision: Literal["approve", "reject"],
                note: str) -> str:
    """Review a peer's proposed tool: its tests are run first, and the result recorded.

    :param name: the tool's name
    :param decision: approve or reject
    :param note: why
    """
    review = registry(env.config).review(env.home.name, name, decision, note,
                                         wrap=boxed(env))
    return json.dumps({k: review[k] for k in ("decision", "tests_passed", "callable")})


@tool
def tool_list(env: ToolEnv) -> str:
    """List the proposed tools and whether each is callable."""
    return json.dumps(registry(env.config).listing())


DYNAMIC_ADMIN_TOOLS = (tool_propose, tool_review, tool_list)


def dynamic_tools(config: CitizenConfig) -> dict[str, Tool]:
    """Every approved, passing, unmodified dynamic tool, as a callable Tool."""
    reg = registry(config)
    out: dict[str, Tool] = {}
    for entry in reg.listing():
        if not entry["callable"]:
            continue
        manifest = reg.manifest(entry["name"])

        def call(env: ToolEnv, _name: str = entry["name"], **args: Any) -> str:
            return registry(env.config).call(_name, args, env.home.dir,
                                             scrubbed_env(str(env.home.dir)), wrap=boxed(env))

        out[entry["name"]] = Tool(entry["name"], f"{manifest['description']} (by "
                                  f"{manifest['author']})", dict(manifest["input_schema"]), call)
    return out
