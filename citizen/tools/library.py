"""Library tools: read, search, propose and review knowledge modules (`shared.library`)."""

from __future__ import annotations

import json
from typing import Literal

from citizen import civilization
from citizen.tools.base import ToolEnv, tool
from shared.library import Library


def library(env: ToolEnv) -> Library:
    return civilization.commons(approvals=env.config.library_approvals).library


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


@tool(reads=True, cacheable=True)
def library_list(env: ToolEnv, domain: str = "") -> str:
    """List the approved knowledge modules (id, domain, summary, version, maintainer).

    :param domain: only this domain (git, python, …); empty for all
    """
    return _json(library(env).modules(domain)) or "[]"


@tool(reads=True, cacheable=True)
def library_load(env: ToolEnv, module_id: str) -> str:
    """Read one approved module in full.

    :param module_id: the module's id
    """
    return _json(library(env).load(module_id))


@tool(reads=True, cacheable=True)
def library_search(env: ToolEnv, query: str) -> str:
    """Search the approved modules by words.

    :param query: words to look for
    """
    hits = library(env).search(query)
    return _json(hits) if hits else "no matches"


@tool
def library_propose(env: ToolEnv, module_id: str, domain: str, summary: str,
                    content: str) -> str:
    """Propose a knowledge module from your experience; peers review it before it is published.

    :param module_id: a short id: lowercase letters, digits, '-' or '_'
    :param domain: its domain, e.g. git, python, systems
    :param summary: one line saying what it teaches
    :param content: the knowledge itself: concrete, checked, short
    """
    module = library(env).propose(env.home.name, module_id, domain, summary, content)
    return f"proposed {module['id']} version {module['version']}; it waits for peer review"


@tool(reads=True, cacheable=True)
def library_pending(env: ToolEnv) -> str:
    """List the proposals waiting for review, with the reviews they have."""
    return _json(library(env).pending())


@tool
def library_review(env: ToolEnv, module_id: str, decision: Literal["approve", "reject"],
                   note: str) -> str:
    """Review a peer's proposed module.

    :param module_id: the proposal's id
    :param decision: approve or reject
    :param note: why: what is right, wrong or missing
    """
    return library(env).review(env.home.name, module_id, decision, note)


LIBRARY_TOOLS = (library_list, library_load, library_search, library_propose, library_pending,
                 library_review)
