"""Mail through the broker: the only way a citizen's mail leaves or arrives.

The daemon never logs in to its mailbox - the password is the broker's (mailbox.py). It
asks, and the broker checks what the operator relies on:

- `POST mail/send` {id, to, subject, body, in_reply_to?, references?}: refused unless
  the operator's `permissions.can_send_email` allows it, every recipient is an operator
  (`mail.allowed_senders`) or another citizen, and the citizen's sends of the last hour
  stay under `mail.max_sends_per_hour` (counted here, mailstate.py). The broker writes
  the message itself: From is the citizen's mailbox, no header comes from the daemon.
- `POST mail/inbox`, `mail/ack`, `mail/wait`: the INBOX, screened here before anything
  reaches the daemon (citizen.broker.inbox).
- `GET mail/quarantine`, `POST mail/check` (`citizen doctor`: both logins).

Every request may carry `timeout_s`, to give up on a silent server sooner (never later)
than the broker's 30 s. The rules (allowed senders, folders, caps) come from the
operator's files, as for model calls (citizen.broker.mailrules).
"""

from __future__ import annotations

import logging
import re
import smtplib
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from citizen import config
from citizen.broker import (
    inbox,  # noqa: F401 - the intake's routes
    mailbox,
    mailstate,
)
from citizen.broker.mailbox import Account, MailboxError
from citizen.broker.mailrules import (
    MB,
    account_of,
    allowed,
    config_of,
    header_text,
    json_body,
    logout,
    recipients,
    text_field,
)
from citizen.broker.refused import Refused
from citizen.broker.server import Broker, route
from citizen.config import paths

log = logging.getLogger(__name__)
_MSGID = re.compile(r"<[^<>\s]{1,250}>")


def compose(acct: Account, cfg: config.CitizenConfig, to: list[str],
             data: dict[str, Any]) -> EmailMessage:
    """The message the broker sends: every header is the broker's."""
    body = text_field(data, "body", int(cfg.mail.max_message_mb * MB))
    in_reply_to = _MSGID.findall(text_field(data, "in_reply_to", 1000))[:1]
    refs = data.get("references", [])
    refs = refs.split() if isinstance(refs, str) else refs
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise Refused(400, "invalid_request_error", "references: a list of Message-IDs")
    references = [m for r in refs[-50:] for m in _MSGID.findall(r)]
    msg = EmailMessage()
    # From is the mailbox the broker logs in as (EMAIL_USER): an SMTP server takes mail
    # from its own user, and no daemon can name another sender.
    sender = acct.user if "@" in acct.user else cfg.email
    msg["From"] = sender
    msg["To"] = ", ".join(to)
    msg["Subject"] = header_text(text_field(data, "subject", 1000))
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to[0]
    if references:
        msg["References"] = " ".join(references)
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or "experience.local")
    msg.set_content(body)
    return msg


@route("POST", "/v1/experience/mail/send")
def send(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Check, write and send one message for `citizen` (module doc)."""
    data = json_body(raw)
    cfg = config_of(citizen)
    # The operator's permission governs every message, replies included: the broker
    # cannot tell a reply from any other mail the daemon asks it to send.
    if not cfg.permissions.get("can_send_email", False):
        raise Refused(403, "permission_error",
                      f"{citizen} may not send mail: permissions.can_send_email is not granted "
                      f"(the operator's /etc/experience/{citizen}.json decides)")
    to = recipients(data)
    acct = account_of(citizen, data)
    permitted = allowed(citizen, cfg, acct.user)
    for address in to:
        if address not in permitted:
            raise Refused(403, "permission_error",
                          f"{address} is not an operator on the allow-list or a citizen; mail "
                          "goes only to those (the operator's mail.allowed_senders)")
    msg = compose(acct, cfg, to, data)
    request_id = text_field(data, "id", 200) or None
    state = mailstate.state(paths.broker_state())
    try:
        if request_id is not None and (done := state.sent(citizen, request_id)):
            return 200, done  # sent before: the daemon lost our answer, not the mail
        row = state.reserve(citizen, request_id, cfg.mail.max_sends_per_hour, to,
                            str(msg["Subject"]))
    except mailstate.Limited as exc:
        raise Refused(429, "rate_limit_error", str(exc),
                      {"retry-after": str(exc.retry_after)}) from None
    except mailstate.InFlight:
        raise Refused(409, "conflict", "this request is being sent right now; ask again "
                      "later") from None
    try:
        server = mailbox.connect_smtp(acct)
        try:
            # The envelope is the checked list, never a header the daemon wrote.
            # CRLF line ends (policy.SMTP): smtplib sends bytes as they are, and a body of
            # bare LFs is one line to the server, refused past 1000 characters.
            server.sendmail(str(msg["From"]), to, msg.as_bytes(policy=policy.SMTP))
        finally:
            server.quit()
    except (MailboxError, smtplib.SMTPException, OSError) as exc:
        state.release(row)
        raise Refused(502, "mail_error", f"not sent: {exc}") from None
    state.settle(row, str(msg["Message-ID"]))
    log.info("%s mailed %s: %s", citizen, ", ".join(to), msg["Message-ID"])
    return 200, {"message_id": str(msg["Message-ID"]), "from": str(msg["From"]), "to": to}


# ------------------------------------------------------------ the operator's views


@route("GET", "/v1/experience/mail/quarantine")
def quarantine(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    return 200, {"rows": mailstate.state(paths.broker_state()).quarantined(citizen)}


@route("POST", "/v1/experience/mail/check")
def check(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Both logins, for `citizen doctor`."""
    data = json_body(raw)
    cfg = config_of(citizen)
    acct = account_of(citizen, data)
    try:
        logout(mailbox.connect_imap(acct))
        mailbox.connect_smtp(acct).quit()
    except (MailboxError, smtplib.SMTPException, OSError) as exc:
        raise Refused(502, "mail_error", str(exc)) from exc
    state = mailstate.state(paths.broker_state())
    return 200, {"address": acct.user, "imap": str(acct.imap), "smtp": str(acct.smtp),
                 "operators": len(cfg.mail.allowed_senders),
                 "can_send": bool(cfg.permissions.get("can_send_email", False)),
                 "sent_last_hour": state.sends_within(citizen),
                 "max_sends_per_hour": cfg.mail.max_sends_per_hour}
