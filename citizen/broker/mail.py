"""Mail through the broker: the only way a citizen's mail leaves or arrives.

The daemon never logs in to its mailbox - the password is the broker's (mailbox.py). It
asks, and the broker checks what the operator relies on:

- `POST mail/send` {id, to, subject, body, in_reply_to?, references?}: refused unless
  the operator's `permissions.can_send_email` allows it, every recipient is an operator
  (`mail.allowed_senders`) or another citizen, and the citizen's sends of the last hour
  stay under `mail.max_sends_per_hour` (counted here, mailstate.py). The broker writes
  the message itself: From is the citizen's mailbox, no header comes from the daemon.
- `POST mail/inbox`: the INBOX, screened before anything reaches the daemon - a stranger's
  mail, one over `mail.max_message_mb` (decided on RFC822.SIZE, never downloaded) and one
  without a readable sender go to Quarantine here. The rest comes as raw bytes, a batch
  of at most BATCH_BYTES (`more` says there is more).
- `POST mail/ack` {uidvalidity, acks: [{uid, to: processed|quarantine, reason, …}]}: the
  daemon made a task of each (or refused it, with the reason); the broker moves them.
- `POST mail/wait` {uidnext?, wait_s}: IMAP IDLE on the daemon's behalf - answers when
  mail arrived after `uidnext`, or after `wait_s` (IDLE is renewed by asking again).

Every request may carry `timeout_s`, to give up on a silent server sooner (never later)
than the broker's 30 s.
- `GET mail/quarantine`, `POST mail/check` (`citizen doctor`: both logins).

Every citizen's operator rules (allowed senders, folders, caps) come from the operator's
files, as for model calls (citizen.broker.rules).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import smtplib
import time
from email.message import EmailMessage
from email.utils import formatdate, getaddresses, make_msgid
from typing import Any

from citizen import config
from citizen.broker import mailbox, mailstate, service
from citizen.broker.mailbox import Account, MailboxError, NoMailbox
from citizen.broker.refused import Refused
from citizen.broker.server import Broker, route
from citizen.errors import ConfigError

log = logging.getLogger(__name__)
MB = 1024 * 1024
BATCH_BYTES = 16 * MB  # raw mail per inbox answer (at least one message): a bounded JSON
MAX_RECIPIENTS = 20
MAX_WAIT_S = 300.0  # one IDLE request; the daemon asks again
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MSGID = re.compile(r"<[^<>\s]{1,250}>")


# ------------------------------------------------------------ the operator's rules


def _config(citizen: str) -> config.CitizenConfig:
    # On a server the citizen's own config.json sets nothing here (the broker's user
    # cannot read a home): the templates and the operator's file, as for model calls.
    try:
        return config.load_citizen(citizen, own=not config.server_mode())
    except ConfigError as exc:
        raise Refused(500, "api_error", f"the broker cannot read {citizen}'s rules: "
                      f"{exc}") from exc


def _account(citizen: str, body: dict[str, Any]) -> Account:
    timeout = body.get("timeout_s", mailbox.TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        timeout = mailbox.TIMEOUT_S
    try:
        # The caller may ask to give up sooner (a doctor, a test), never to wait longer.
        return mailbox.account(citizen, min(max(float(timeout), 1.0), mailbox.TIMEOUT_S))
    except NoMailbox as exc:
        raise Refused(404, "not_configured", str(exc)) from exc
    except MailboxError as exc:
        raise Refused(500, "api_error", str(exc)) from exc


def _citizen_names() -> list[str]:
    if not config.server_mode():
        from citizen import civilization  # noqa: PLC0415 - dev mode: the homes say

        return civilization.citizens()
    import grp  # noqa: PLC0415
    import pwd  # noqa: PLC0415

    from citizen.broker.identity import CITIZENS_GROUP  # noqa: PLC0415

    # The users whose primary group is `citizens` (identity.caller's test): root makes
    # them; the broker's user cannot read a home to list them any other way.
    gid = grp.getgrnam(CITIZENS_GROUP).gr_gid
    return sorted(p.pw_name for p in pwd.getpwall() if p.pw_gid == gid)


def allowed(citizen: str, cfg: config.CitizenConfig, own: str) -> set[str]:
    """Who a citizen may mail and take mail from: the operator's allowed senders and
    every citizen's configured address - all from the operator's files, so no citizen
    adds to it - minus its own mailbox (its mail must not loop back in)."""
    found = {a.lower() for a in cfg.mail.allowed_senders}
    for name in _citizen_names():
        try:
            found.add((cfg if name == citizen else _config(name)).email.lower())
        except Refused:  # one citizen's broken file must not stop the others' mail
            continue
    found.discard(own.lower())
    found.discard("")
    return found


def _body(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        raise Refused(400, "invalid_request_error", f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise Refused(400, "invalid_request_error", "send a JSON object")
    return data


def _text(data: dict[str, Any], key: str, limit: int) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or len(value) > limit:
        raise Refused(400, "invalid_request_error", f"{key} must be text of at most {limit} "
                      "characters")
    return value


def _header_text(value: str) -> str:
    # Every control character becomes a space: a CR/LF would be a header injection.
    return " ".join(_CONTROL.sub(" ", value).split())


def _recipients(data: dict[str, Any]) -> list[str]:
    given = data.get("to")
    items = [given] if isinstance(given, str) else given
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise Refused(400, "invalid_request_error", "to: an address or a list of addresses")
    found = [a.strip().lower() for _, a in getaddresses(items) if a.strip()]
    if not found or len(found) > MAX_RECIPIENTS or any(
            a.count("@") != 1 or _CONTROL.search(a) for a in found) or any(
            _CONTROL.search(x) for x in items):
        raise Refused(400, "invalid_request_error",
                      f"to: 1 to {MAX_RECIPIENTS} plain addresses (name@domain)")
    return sorted(set(found))


# ------------------------------------------------------------ send


def compose(acct: Account, cfg: config.CitizenConfig, to: list[str],
             data: dict[str, Any]) -> EmailMessage:
    """The message the broker sends: every header is the broker's."""
    body = _text(data, "body", int(cfg.mail.max_message_mb * MB))
    in_reply_to = _MSGID.findall(_text(data, "in_reply_to", 1000))[:1]
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
    msg["Subject"] = _header_text(_text(data, "subject", 1000))
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
    data = _body(raw)
    cfg = _config(citizen)
    # The operator's permission governs every message, replies included: the broker
    # cannot tell a reply from any other mail the daemon asks it to send.
    if not cfg.permissions.get("can_send_email", False):
        raise Refused(403, "permission_error",
                      f"{citizen} may not send mail: permissions.can_send_email is not granted "
                      f"(the operator's /etc/experience/{citizen}.json decides)")
    to = _recipients(data)
    acct = _account(citizen, data)
    permitted = allowed(citizen, cfg, acct.user)
    for address in to:
        if address not in permitted:
            raise Refused(403, "permission_error",
                          f"{address} is not an operator on the allow-list or a citizen; mail "
                          "goes only to those (the operator's mail.allowed_senders)")
    msg = compose(acct, cfg, to, data)
    request_id = _text(data, "id", 200) or None
    state = mailstate.state(service.state_dir())
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
            server.sendmail(str(msg["From"]), to, msg.as_bytes())
        finally:
            server.quit()
    except (MailboxError, smtplib.SMTPException, OSError) as exc:
        state.release(row)
        raise Refused(502, "mail_error", f"not sent: {exc}") from None
    state.settle(row, str(msg["Message-ID"]))
    log.info("%s mailed %s: %s", citizen, ", ".join(to), msg["Message-ID"])
    return 200, {"message_id": str(msg["Message-ID"]), "from": str(msg["From"]), "to": to}


# ------------------------------------------------------------ intake


def _imap_failed(acct: Account, exc: Exception) -> Refused:
    return Refused(502, "mail_error", f"IMAP connection to {acct.imap} broke: {exc}")


def _screen(info: dict[bytes, Any], permitted: set[str], cap: int) -> tuple[str, str, str]:
    """(message id, sender, why it is quarantined or '') from the headers and size."""
    from citizen.mail.message import BadMail, headers, message_id_of, sender_of  # noqa: PLC0415

    head = headers(info[b"BODY[HEADER]"])
    try:
        message_id = message_id_of(head, info[b"BODY[HEADER]"])
    except BadMail as exc:
        return "?", "?", exc.reason
    try:
        sender = sender_of(head)
    except BadMail as exc:
        return message_id, "?", exc.reason
    if sender not in permitted:
        return message_id, sender, f"unknown sender {sender} (not on the allow-list)"
    size = int(info[b"RFC822.SIZE"])
    if size > cap:  # decided on RFC822.SIZE: the body is never downloaded
        return message_id, sender, f"over-size: {size} bytes > {cap}"
    return message_id, sender, ""


@route("POST", "/v1/experience/mail/inbox")
def inbox(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """The INBOX, screened: strangers and over-size mail quarantined here, the rest as
    raw bytes for the daemon to turn into tasks and acknowledge (module doc)."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415

    data = _body(raw)
    cfg = _config(citizen)
    acct = _account(citizen, data)
    permitted = allowed(citizen, cfg, acct.user)
    cap = int(cfg.mail.max_message_mb * MB)
    state = mailstate.state(service.state_dir())
    try:
        client = mailbox.connect_imap(acct)
    except MailboxError as exc:
        raise Refused(502, "mail_error", str(exc)) from exc
    messages: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    more, budget = False, BATCH_BYTES
    try:
        for folder in (cfg.mail.processed_folder, cfg.mail.quarantine_folder):
            if not client.folder_exists(folder):
                client.create_folder(folder)
        validity = int(client.select_folder("INBOX")[b"UIDVALIDITY"])
        uids = client.search("ALL")
        heads = client.fetch(uids, ["RFC822.SIZE", "INTERNALDATE", "BODY.PEEK[HEADER]"]) \
            if uids else {}
        for uid in uids:
            info = heads.get(uid)
            if info is None:
                continue  # expunged meanwhile
            message_id, sender, why = _screen(info, permitted, cap)
            if why:
                mailbox.move(client, [uid], cfg.mail.quarantine_folder)
                state.quarantine(citizen, message_id, sender, why)
                log.warning("%s: mail %s from %s quarantined: %s", citizen, message_id,
                            sender, why)
                refused.append({"uid": uid, "message_id": message_id, "from": sender,
                                "reason": why})
                continue
            size = int(info[b"RFC822.SIZE"])
            if messages and size > budget:
                more = True  # the next answer; never more than the batch in memory
                continue
            body = client.fetch([uid], ["BODY.PEEK[]"])[uid][b"BODY[]"]
            budget -= len(body)
            messages.append({"uid": uid, "size": size, "message_id": message_id,
                             "received": info[b"INTERNALDATE"].isoformat(),
                             "raw": base64.b64encode(body).decode()})
    except (IMAPClientError, OSError, TimeoutError) as exc:
        raise _imap_failed(acct, exc) from None
    finally:
        _logout(client)
    return 200, {"address": acct.user, "uidvalidity": validity, "messages": messages,
                 "quarantined": refused, "more": more}


@route("POST", "/v1/experience/mail/ack")
def ack(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Move what the daemon took (Processed) or refused (Quarantine, with its reason)."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415

    data = _body(raw)
    acks = data.get("acks")
    if not isinstance(acks, list) or not all(isinstance(a, dict) and isinstance(
            a.get("uid"), int) and a.get("to") in ("processed", "quarantine") for a in acks):
        raise Refused(400, "invalid_request_error",
                      'acks: a list of {"uid": N, "to": "processed" | "quarantine"}')
    cfg = _config(citizen)
    acct = _account(citizen, data)
    state = mailstate.state(service.state_dir())
    try:
        client = mailbox.connect_imap(acct)
    except MailboxError as exc:
        raise Refused(502, "mail_error", str(exc)) from exc
    try:
        validity = int(client.select_folder("INBOX")[b"UIDVALIDITY"])
        if validity != data.get("uidvalidity"):
            # The INBOX was rebuilt: these UIDs may now name other messages.
            raise Refused(409, "conflict", "the INBOX changed since it was read (UIDVALIDITY); "
                          "read it again")
        present = set(client.search("ALL"))
        done = [a for a in acks if a["uid"] in present]
        mailbox.move(client, [a["uid"] for a in done if a["to"] == "processed"],
                     cfg.mail.processed_folder)
        quarantined = [a for a in done if a["to"] == "quarantine"]
        mailbox.move(client, [a["uid"] for a in quarantined], cfg.mail.quarantine_folder)
    except (IMAPClientError, OSError, TimeoutError) as exc:
        raise _imap_failed(acct, exc) from None
    finally:
        _logout(client)
    for a in quarantined:
        state.quarantine(citizen, _header_text(str(a.get("message_id", "?"))),
                         _header_text(str(a.get("from", "?"))),
                         _header_text(str(a.get("reason", "refused by the citizen"))))
    return 200, {"moved": len(done)}


@route("POST", "/v1/experience/mail/wait")
def wait(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """IMAP IDLE for the daemon: {new, uidnext, idle}. `new` at once when mail came
    after the caller's `uidnext` (or it gave none: it has to catch up)."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415

    data = _body(raw)
    seen = data.get("uidnext")
    span = data.get("wait_s", 60.0)
    span = min(max(float(span), 0.0), MAX_WAIT_S) if isinstance(span, int | float) else 60.0
    acct = _account(citizen, data)
    try:
        client = mailbox.connect_imap(acct)
    except MailboxError as exc:
        raise Refused(502, "mail_error", str(exc)) from exc
    try:
        uidnext = int(client.select_folder("INBOX")[b"UIDNEXT"])
        if not isinstance(seen, int) or uidnext > seen:
            return 200, {"new": True, "uidnext": uidnext, "idle": True}
        if b"IDLE" not in client.capabilities():
            return 200, {"new": False, "uidnext": uidnext, "idle": False}
        client.idle()
        deadline, new = time.monotonic() + span, False
        while not new and (left := deadline - time.monotonic()) > 0:
            responses = client.idle_check(timeout=min(20.0, left))
            new = any(len(r) > 1 and r[1] in (b"EXISTS", b"RECENT") for r in responses)
        client.idle_done()
        if new:
            uidnext = int(client.select_folder("INBOX")[b"UIDNEXT"])
        return 200, {"new": new, "uidnext": uidnext if new else seen, "idle": True}
    except (IMAPClientError, OSError, TimeoutError) as exc:
        raise _imap_failed(acct, exc) from None
    finally:
        _logout(client)


# ------------------------------------------------------------ the operator's views


@route("GET", "/v1/experience/mail/quarantine")
def quarantine(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    return 200, {"rows": mailstate.state(service.state_dir()).quarantined(citizen)}


@route("POST", "/v1/experience/mail/check")
def check(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Both logins, for `citizen doctor`."""
    data = _body(raw)
    cfg = _config(citizen)
    acct = _account(citizen, data)
    try:
        _logout(mailbox.connect_imap(acct))
        mailbox.connect_smtp(acct).quit()
    except (MailboxError, smtplib.SMTPException, OSError) as exc:
        raise Refused(502, "mail_error", str(exc)) from exc
    state = mailstate.state(service.state_dir())
    return 200, {"address": acct.user, "imap": str(acct.imap), "smtp": str(acct.smtp),
                 "operators": len(cfg.mail.allowed_senders),
                 "can_send": bool(cfg.permissions.get("can_send_email", False)),
                 "sent_last_hour": state.sends_within(citizen),
                 "max_sends_per_hour": cfg.mail.max_sends_per_hour}


def _logout(client: Any) -> None:
    with contextlib.suppress(Exception):  # the connection may already be gone
        client.logout()
