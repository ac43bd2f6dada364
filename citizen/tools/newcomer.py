"""`citizen_request`: ask the operator for a new citizen, through the broker.

Offered only where the operator's rules grant `permissions.can_onboard_citizens`
(its `@tool(permission=...)`); the broker checks that permission again from the
operator's files (citizen.broker.onboarding), since a citizen may rewrite this code.
"""

from __future__ import annotations

from citizen.access import client
from citizen.errors import ProviderUnavailable
from citizen.tools.base import ToolEnv, ToolFailure, tool

REQUEST_PATH = "/v1/experience/citizens/request"


# A newcomer is a new Unix user with its own budget: the operator's to grant (the broker
# checks the permission again from the operator's files, since a citizen may rewrite this).
@tool(permission="can_onboard_citizens")
def citizen_request(env: ToolEnv, name: str, focus: str, strengths: str, why: str) -> str:
    """Ask for a new citizen to join the civilization. The operator reviews the request
    and creates the citizen only if they agree; the newcomer starts from the shared
    baseline and learns that you asked for it.

    :param name: its name: 1-31 lowercase letters, digits, '-' or '_', starting with a letter
    :param focus: what it should focus on, in a few words
    :param strengths: its strengths, comma-separated (at most 8)
    :param why: why the civilization needs it (the operator reads this)
    """
    payload = {"name": name, "focus": focus, "why": why,
               "strengths": [s.strip() for s in strengths.split(",") if s.strip()]}
    try:
        status, answer = client.request(env.home.name, "POST", REQUEST_PATH, payload)
    except ProviderUnavailable as exc:
        raise ToolFailure(f"the request did not reach the broker: {exc}") from exc
    if status != 201:
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise ToolFailure(f"refused: {message or status}")
    env.event("citizen_request", id=answer.get("id"), newcomer=name)
    return (f"request {answer.get('id')} for {name} recorded; the operator approves or "
            "rejects it - nothing more to do now")
