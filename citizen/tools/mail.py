"""Mail tools: send a message (the broker checks recipients, rate and permission), and
list the mail that became tasks."""

from __future__ import annotations

import json

from citizen.mail.intake import Intake
from citizen.mail.outbox import deliver, queue, request
from citizen.tools.base import ToolEnv, ToolFailure, tool


# Mail leaves the machine under the operator's name: only if the operator grants it.
@tool(permission="can_send_email")
def send_email(env: ToolEnv, to: str, subject: str, body: str) -> str:
    """Send an email to an operator or another citizen.

    :param to: the recipient's address (operators on the allow-list, or citizens)
    :param subject: the subject line
    :param body: the plain-text message
    """
    path = queue(env.home, request(to.strip(), subject, body), "tool")
    done = deliver(env.home, path)
    if done.state == "sent":
        return "sent"
    if done.state == "refused":
        raise ToolFailure(done.detail)
    if done.state == "limited":  # the model is told to try later: it must not also go later
        path.unlink(missing_ok=True)
        raise ToolFailure(done.detail)
    return f"queued; it will be sent later ({done.detail})"


@tool(reads=True)  # the world changes its result: never cached
def check_email(env: ToolEnv, limit: int = 10) -> str:
    """List the latest mail that became your tasks (sender, subject, task, its state).

    :param limit: how many messages to list
    """
    intake = Intake(env.home, env.config, {})
    rows = [{"message_id": mid, "task": tid, "state": env.tasks.where(tid)}
            for mid, tid in list(intake.ledger().items())[-max(1, min(limit, 50)):]]
    return json.dumps(rows) if rows else "no mail has arrived yet"
