"""Mail tools: send a message (to operators and citizens only, rate-limited), check mail."""

from __future__ import annotations

import json
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from citizen.mail import MailError, account, citizen_addresses
from citizen.mail.intake import Intake
from citizen.mail.outbox import flush, queue, sent_recently
from citizen.tools.base import ToolEnv, ToolFailure, tool


@tool
def send_email(env: ToolEnv, to: str, subject: str, body: str) -> str:
    """Send an email to an operator or another citizen.

    :param to: the recipient's address (operators on the allow-list, or citizens)
    :param subject: the subject line
    :param body: the plain-text message
    """
    acct = account(env.secrets)
    allowed = {*env.config.mail.allowed_senders, *citizen_addresses()}
    if to.strip().lower() not in allowed:
        raise ToolFailure(f"{to} is not an operator on the allow-list or a citizen; mail "
                          "goes only to those")
    limit = env.config.mail.max_sends_per_hour
    if sent_recently(env.home, "tool") >= limit:
        raise ToolFailure(f"the limit of {limit} messages per hour is reached; try later")
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = acct.user, to.strip(), subject
    msg["Date"] = formatdate()
    msg["Message-ID"] = make_msgid(domain=acct.user.rpartition("@")[2] or "experience.local")
    msg.set_content(body)
    queue(env.home, msg, "tool")
    sent, error = flush(env.home, acct)
    return "sent" if sent and not error else f"queued; it will be sent later ({error})"


@tool
def check_email(env: ToolEnv, limit: int = 10) -> str:
    """List the latest mail that became your tasks (sender, subject, task, its state).

    :param limit: how many messages to list
    """
    try:
        acct = account(env.secrets)
    except MailError as exc:
        raise ToolFailure(str(exc)) from exc
    intake = Intake(env.home, env.config, acct, {})
    rows = [{"message_id": mid, "task": tid, "state": env.tasks.where(tid)}
            for mid, tid in list(intake.ledger().items())[-max(1, min(limit, 50)):]]
    return json.dumps(rows) if rows else "no mail has arrived yet"
