"""Tools are typed functions: name, description and JSON schema come from the signature.

    @tool
    def read_file(env: ToolEnv, path: str, limit: int = 20000) -> str:
        '''Read a text file.

        :param path: file path, relative to your home
        '''

A tool returns text for the model. A fault in the tool's use (bad path, timeout)
raises `ToolFailure`, which goes back to the model as an observation; anything
else is a bug in our code and ends the wake with the traceback in its log.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from citizen.config import CitizenConfig, Secrets
from citizen.config.paths import Home
from citizen.errors import CitizenError
from citizen.home.contexts import Context
from citizen.home.memory import Memory
from citizen.home.tasks import Task, TaskQueue
from citizen.home.wakelog import WakeLog
from citizen.llm.base import ToolSpec

RESULT_CHARS = 8000  # what a tool result may put into the conversation
# The operator's permissions (config `permissions`), checked where the action happens:
# every tool call goes through `Tool.run`, whoever asks - the wake loop or `citizen tool`.
# `can_use_network` is checked by shell_command itself (it decides the sandbox's network).
# `citizen_request` only asks: the broker checks `can_onboard_citizens` again from the
# operator's files, and root creates the citizen (citizen.broker.onboarding).
PERMISSIONS = {
    "citizen_request": "can_onboard_citizens",
    "send_email": "can_send_email",
    "code_announce": "can_modify_shared_code",
    "code_adopt": "can_modify_shared_code",
    "tool_propose": "can_create_tools",
    "debate_start": "can_start_debates",
}
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
    """A callable tool and its schema."""

    name: str
    description: str
    schema: dict[str, Any]
    func: Callable[..., str]

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.schema)

    def allowed(self, config: CitizenConfig) -> bool:
        """Whether the operator's permissions let this citizen use this tool."""
        need = PERMISSIONS.get(self.name)
        return need is None or bool(config.permissions.get(need, False))

    def run(self, env: ToolEnv, args: dict[str, Any]) -> str:
        if not self.allowed(env.config):
            raise ToolFailure(f"{self.name} needs the permission {PERMISSIONS[self.name]}, "
                              "which your operator has not granted")
        out = self.func(env, **args)
        return clip(out)


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


def tool(func: Callable[..., str]) -> Tool:
    """Make a `Tool` from a function whose first parameter is the `ToolEnv`."""
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
    return Tool(func.__name__, summary, schema, func)
