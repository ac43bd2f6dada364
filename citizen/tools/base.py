"""Tools are typed functions: name, description and JSON schema come from the signature.

    @tool
    def read_file(env: ToolEnv, path: str, limit: int = 20000) -> str:
        '''Read a text file.

        :param path: file path, relative to your home
        '''

Its policy sits on the decorator, next to the function, not in tables keyed by name:

    @tool(reads=True, cacheable=True)        # changes nothing; a repeat may be cached
    @tool(reads=True)                        # changes nothing ours, but the world may
    @tool(permission="can_send_email")       # only if the operator grants it

A tool returns text for the model. Its arguments are bound against its signature
before it runs: arguments it does not take are a `ToolFailure` naming its parameters.
A fault in the tool's use (bad path, timeout) raises `ToolFailure`, which goes back to
the model as an observation; anything else raised inside the tool (a TypeError too) is
a bug in our code: it ends the wake with the traceback in its log, marked as raised
inside the tool, never mistaken for bad arguments.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, overload

from citizen.config import CitizenConfig, Secrets
from citizen.config.paths import Home
from citizen.errors import CitizenError
from citizen.home.contexts import Context
from citizen.home.memory import Memory
from citizen.home.tasks import Task, TaskQueue
from citizen.home.wakelog import WakeLog
from citizen.llm.base import ToolSpec
from shared.errors import SharedError

RESULT_CHARS = 8000  # what a tool result may put into the conversation
# The operator's permissions (config `permissions`), checked where the action happens:
# every tool call goes through `Tool.run`, whoever asks - the wake loop or `citizen tool`.
# Each tool names the one it needs (`@tool(permission=...)`, with its why beside it).
# `can_use_network` is checked by shell_command itself (it decides the sandbox's network).
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


class ToolFailure(CitizenError, RuntimeError):
    """The tool could not do what was asked; the message goes back to the model."""


class Judge(Protocol):
    """Someone other than the worker who fixes what a task must leave behind and says
    whether a claim of "done" holds (citizen.wake.verifier.Verifier)."""

    def __call__(self, task: str, summary: str, evidence: list[str],
                 files: list[Path]) -> tuple[str, str]:
        """(verdict "pass" | "fail" | "unverified", reason)."""
        ...

    def extract(self, task: str) -> dict[str, Any] | None:
        """What the task names as its deliverables, or None if it cannot be asked."""
        ...


@dataclass
class ToolEnv:
    """What a tool may touch during one wake."""

    home: Home
    config: CitizenConfig
    secrets: Secrets
    tasks: TaskQueue
    memory: Memory
    contexts: dict[str, Context]
    task: Task | None = None
    task_outcome: tuple[str, str] | None = None  # (status, result) once a task tool ends it
    log: WakeLog | None = None
    # A second opinion on "done" from someone other than the worker (citizen.wake.verifier).
    # None: none in this call.
    verify: Judge | None = None

    def event(self, name: str, **data: Any) -> None:
        """Log one event of this wake (nothing when the wake keeps no log, e.g. in tests)."""
        if self.log is not None:
            self.log.event(name, **data)


@dataclass(frozen=True)
class Tool:
    """A callable tool, its schema and its policy.

    `reads`: it changes no state of this citizen's, so calling it is no change of state
    (the wake loop neither empties its cache nor restarts the repetition counts).
    `cacheable`: a reading tool whose result depends only on state the wake's own calls
    change, so a repeat is answered from the wake's cache until a change of state (not
    mail or the web: the world changes those).
    `permission`: the operator's permission (config `permissions`) it needs, or None.
    `writes`: the argument naming the file it writes, if any (the wake log records it,
    and a task's evidence is checked against it: citizen.tools.evidence).
    """

    name: str
    description: str
    schema: dict[str, Any]
    func: Callable[..., str]
    reads: bool = False
    cacheable: bool = False
    permission: str | None = None
    writes: str | None = None

    def __post_init__(self) -> None:
        if self.cacheable and not self.reads:
            raise ValueError(f"tool {self.name}: only a reading tool's result may be cached")
        if self.writes is not None and (self.reads or self.writes not in self.schema.get(
                "properties", {})):
            raise ValueError(f"tool {self.name}: writes={self.writes!r} must name an argument "
                             "of a tool that does not only read")

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.schema)

    def allowed(self, config: CitizenConfig) -> bool:
        """Whether the operator's permissions let this citizen use this tool."""
        return self.permission is None or bool(config.permissions.get(self.permission, False))

    def parameters(self) -> str:
        """Its parameters as the model should read them: `path, limit (optional)`."""
        props, required = self.schema.get("properties"), self.schema.get("required")
        names = list(props) if isinstance(props, dict) else []
        need = required if isinstance(required, list) else []
        return ", ".join(p if p in need else f"{p} (optional)" for p in names) or "none"

    def run(self, env: ToolEnv, args: dict[str, Any]) -> str:
        """Check the permission, bind `args` to the signature, call, clip the result.

        :raises ToolFailure: not permitted, arguments it does not take, or the tool's own.
        """
        if not self.allowed(env.config):
            raise ToolFailure(f"{self.name} needs the permission {self.permission}, "
                              "which your operator has not granted")
        try:
            bound = inspect.signature(self.func).bind(env, **args)
        except TypeError as exc:  # before the call: only the arguments can be wrong here
            raise ToolFailure(f"bad arguments for {self.name} ({exc}); its parameters: "
                              f"{self.parameters()}") from exc
        # Why: binding checks names, not types - a list for a path, or a word outside a
        # Literal, would raise inside the tool and end the wake (three such: a rollback).
        props, need = self.schema.get("properties"), self.schema.get("required")
        need = need if isinstance(need, list) else []
        for key, value in args.items():
            prop = props.get(key) if isinstance(props, dict) else None
            if not isinstance(prop, dict) or (value is None and key not in need
                                              and prop.get("default") is None):
                continue  # unknown to the schema, or an optional None meaning "left out"
            wrong = _mismatch(value, prop)
            if wrong:
                raise ToolFailure(f"bad arguments for {self.name} ({key}: {wrong}); its "
                                  f"parameters: {self.parameters()}")
        try:
            out = self.func(*bound.args, **bound.kwargs)
        except (ToolFailure, SharedError):
            raise
        except Exception as exc:
            exc.add_note(f"raised inside the tool {self.name}: a failure of the tool, "
                         "not of its arguments")
            raise
        return clip(out)


# A JSON schema's types, as the Python values a model's JSON input decodes to.
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,), "null": (type(None),)}


def _mismatch(value: Any, prop: dict[str, Any]) -> str:
    """Why `value` is not what the schema property `prop` takes ('' when it is)."""
    enum = prop.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"{value!r} is not one of {', '.join(map(repr, enum))}"
    wanted = prop.get("type")
    names = [wanted] if isinstance(wanted, str) else wanted if isinstance(wanted, list) else []
    known = [n for n in names if isinstance(n, str) and n in _PY_TYPES]
    if not known:
        return ""
    for name in known:  # a bool is an int to Python, never to JSON
        if isinstance(value, _PY_TYPES[name]) and (name == "boolean"
                                                   or not isinstance(value, bool)):
            return ""
    return f"expected {' or '.join(known)}, got {type(value).__name__}"


def clip(text: str, limit: int = RESULT_CHARS) -> str:
    """Keep the head and the tail of a long text, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - limit} characters cut …]\n{text[-half:]}"


def _param_docs(doc: str) -> dict[str, str]:
    return {m[1]: m[2].strip() for m in re.finditer(r":param (\w+):\s*(.+)", doc)}


def _json_type(annotation: Any) -> dict[str, Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise TypeError(f"tool parameter type {annotation!r} has no JSON schema mapping")


# Every built-in tool's name (each `@tool` adds its own; `citizen.tools` imports every
# module that defines one): the names a dynamic tool may not take.
BUILT_IN: set[str] = set()


@overload
def tool(func: Callable[..., str], /) -> Tool: ...


@overload
def tool(*, reads: bool = False, cacheable: bool = False, permission: str | None = None,
         writes: str | None = None) -> Callable[[Callable[..., str]], Tool]: ...


def tool(func: Callable[..., str] | None = None, /, *, reads: bool = False,
         cacheable: bool = False, permission: str | None = None,
         writes: str | None = None) -> Tool | Callable[[Callable[..., str]], Tool]:
    """Make a `Tool` from a function whose first parameter is the `ToolEnv`: `@tool`,
    or `@tool(reads=..., cacheable=..., permission=..., writes=...)` with its policy
    (see `Tool`)."""
    if func is None:
        return lambda f: _make(f, reads=reads, cacheable=cacheable, permission=permission,
                               writes=writes)
    return _make(func, reads=reads, cacheable=cacheable, permission=permission, writes=writes)


def _make(func: Callable[..., str], *, reads: bool, cacheable: bool,
          permission: str | None, writes: str | None) -> Tool:
    doc = inspect.getdoc(func) or ""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    params = _param_docs(doc)
    hints = typing.get_type_hints(func)
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, param in list(inspect.signature(func).parameters.items())[1:]:
        prop = _json_type(hints[name])
        if name in params:
            prop["description"] = params[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            prop["default"] = param.default
        props[name] = prop
    schema = {"type": "object", "properties": props, "required": required,
              "additionalProperties": False}
    BUILT_IN.add(func.__name__)
    return Tool(func.__name__, summary, schema, func, reads=reads, cacheable=cacheable,
                permission=permission, writes=writes)
