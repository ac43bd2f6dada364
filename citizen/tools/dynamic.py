"""Dynamic tools: propose, review (the reviewer runs the tests) and call approved ones."""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Callable
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


# A proposed tool is code peers run once approved: only if the operator grants it.
@tool(permission="can_create_tools")
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


@tool(reads=True, cacheable=True)
def tool_list(env: ToolEnv) -> str:
    """List the proposed tools and whether each is callable."""
    return json.dumps(registry(env.config).listing())


DYNAMIC_ADMIN_TOOLS = (tool_propose, tool_review, tool_list)


def dynamic_tools(config: CitizenConfig) -> dict[str, Tool]:
    """Every approved, passing, unmodified dynamic tool, as a callable Tool.

    Its policy is set here: a peer's code may do anything its sandbox allows, so each
    call may change state (never cached, it empties the wake's cache) and needs no
    permission beyond the one its proposer needed (`can_create_tools`).
    """
    reg = registry(config)
    out: dict[str, Tool] = {}
    for entry in reg.listing():
        if not entry["callable"]:
            continue
        name = entry["name"]
        if name in BUILT_IN:  # why: a manifest written by hand never takes a built-in's name
            continue
        manifest = reg.manifest(name)
        schema = dict(manifest["input_schema"])
        out[name] = Tool(name, f"{manifest['description']} (by {manifest['author']})", schema,
                         _caller(name, schema), reads=False, cacheable=False, permission=None)
    return out


def _caller(name: str, schema: dict[str, Any]) -> Callable[..., str]:
    """The function a dynamic tool runs, with a signature from its input schema, so its
    arguments are bound like a core tool's before it runs (and its name is no argument
    a caller could override)."""

    def call(env: ToolEnv, **args: Any) -> str:
        return registry(env.config).call(name, args, env.home.dir,
                                         scrubbed_env(str(env.home.dir)), wrap=boxed(env))

    call.__signature__ = _signature(schema)  # type: ignore[attr-defined]
    return call


def _signature(schema: dict[str, Any]) -> inspect.Signature:
    """(env, *, <required>, <optional>=None) from a JSON schema, and `**__extra` too when
    the schema allows other properties; only `(env, **__extra)` when it names a property
    that cannot be a Python parameter."""
    env = inspect.Parameter("env", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    extra = inspect.Parameter("__extra", inspect.Parameter.VAR_KEYWORD)
    props = schema.get("properties")
    names = [str(p) for p in props] if isinstance(props, dict) else []
    required = schema.get("required")
    need = {str(n) for n in required} if isinstance(required, list) else set()
    # Why iskeyword: `class` is an identifier but no parameter (inspect raises ValueError).
    if not all(n.isidentifier() and not keyword.iskeyword(n) and n not in {"env", "__extra"}
               for n in names):
        return inspect.Signature([env, extra])
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [env, *[inspect.Parameter(n, kw) for n in names if n in need],
              *[inspect.Parameter(n, kw, default=None) for n in names if n not in need]]
    if schema.get("additionalProperties", True) is not False:
        params.append(extra)
    return inspect.Signature(params)
