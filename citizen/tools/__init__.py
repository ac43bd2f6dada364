"""The tools a citizen can call: typed functions with their policy on them
(`@tool(reads=, cacheable=, permission=, writes=)`), registered explicitly in `core_tools`;
the bubblewrap `sandbox` everything they run goes through; the `evidence` check of "done".

A new tool is a function in the family module it belongs to, added to the registry
below. May import mail, llm, home, the commons door (`citizen.civilization`), access,
config and errors; never a wake, the daemon, admin, the broker or the CLI.
"""

from __future__ import annotations

from citizen.tools.base import Tool, ToolEnv, ToolFailure, tool
from citizen.tools.code import CODE_TOOLS
from citizen.tools.consensus import propose
from citizen.tools.debate import debate_start
from citizen.tools.dry import COMMONS_TOOLS
from citizen.tools.dynamic import DYNAMIC_ADMIN_TOOLS
from citizen.tools.files import append_file, read_file, str_replace_file, write_file
from citizen.tools.library import LIBRARY_TOOLS
from citizen.tools.mail import check_email, send_email
from citizen.tools.memory import context_add, goal_complete, identity_update, memory_search
from citizen.tools.newcomer import citizen_request
from citizen.tools.shell import shell_command
from citizen.tools.task import task_complete, task_progress, task_stuck
from citizen.tools.web import web_fetch, web_search

__all__ = ["Tool", "ToolEnv", "ToolFailure", "core_tools", "tool"]


def core_tools(mail: bool = False, code: bool = False, search: bool = False) -> dict[str, Tool]:
    """Every core tool by name; `web_search` only when the operator configured a search
    backend (`search`: the citizen's `web.search_url` is set),
    the mail tools only when the citizen has a mailbox, the code evolution tools only
    when its `~/code` is a git repository."""
    tools = [shell_command, read_file, write_file, append_file, str_replace_file, memory_search,
             web_fetch, task_progress, task_complete, task_stuck, context_add, goal_complete,
             identity_update,
             propose, debate_start, citizen_request,
             *LIBRARY_TOOLS, *COMMONS_TOOLS, *DYNAMIC_ADMIN_TOOLS]
    if code:
        tools += CODE_TOOLS
    if search:
        tools.append(web_search)
    if mail:
        tools += [send_email, check_email]
    return {t.name: t for t in tools}
