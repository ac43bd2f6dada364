"""The INBOX through the broker: what reaches the daemon, and what it acknowledges.

- `POST mail/inbox`: screened before anything reaches the daemon - a stranger's mail, one
  over `mail.max_message_mb` (decided on RFC822.SIZE, never downloaded) and one without a
  readable sender go to Quarantine here. The rest comes as raw bytes, a batch of at most
  BATCH_BYTES (`more` says there is more).
- `POST mail/ack` {uidvalidity, acks: [{uid, to: processed|quarantine, reason, …}]}: the
  daemon made a task of each (or refused it, with the reason); the broker moves them.
- `POST mail/wait` {uidnext?, wait_s}: IMAP IDLE on the daemon's behalf - answers when
  mail arrived after `uidnext`, or after `wait_s` (IDLE is renewed by asking again).
"""

from __future__ import annotations

import base64
import logging
import time
from typing import Any

from citizen.broker import mailbox, mailstate
from citizen.broker.mailbox import Account, MailboxError
from citizen.broker.mailrules import (
    MB,
    account_of,
    allowed,
    config_of,
    header_text,
    json_body,
    logout,
)
from citizen.broker.refused import Refused
from citizen.broker.server import Broker, route
from citizen.config import paths
from citizen.mail.message import BadMail, headers, message_id_of, sender_of

log = logging.getLogger(__name__)
BATCH_BYTES = 16 * MB  # raw mail per inbox answer (at least one message): a bounded JSON
MAX_WAIT_S = 300.0  # one IDLE request; the daemon asks again


def _imap_failed(acct: Account, exc: Exception) -> Refused:
    return Refused(502, "mail_error", f"IMAP connection to {acct.imap} broke: {exc}")


def _subject(info: dict[bytes, Any]) -> str:
    """The mail's Subject as one bounded line of text ('' when it has none or it cannot
    be read): what the dashboard's quarantine shows, escaped."""
    try:
        return header_text(str(headers(info[b"BODY[HEADER]"]).get("subject", "")))[:300]
    except Exception:  # noqa: BLE001 - a stranger's broken header: no subject, still quarantined
        return ""


def _screen(info: dict[bytes, Any], permitted: set[str], cap: int) -> tuple[str, str, str]:
    """(message id, sender, why it is quarantined or '') from the headers and size."""
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


def _connect(acct: Account) -> Any:
    """An IMAP login for the broker's own use. :raises Refused: 502 - it failed."""
    try:
        return mailbox.connect_imap(acct)
    except MailboxError as exc:
        raise Refused(502, "mail_error", str(exc)) from exc


@route("POST", "/v1/experience/mail/inbox")
def inbox(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """The INBOX, screened: strangers and over-size mail quarantined here, the rest as
    raw bytes for the daemon to turn into tasks and acknowledge (module doc)."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415 - ≈50 ms, mail only

    data = json_body(raw)
    cfg = config_of(citizen)
    acct = account_of(citizen, data)
    permitted = allowed(citizen, cfg, acct.user)
    cap = int(cfg.mail.max_message_mb * MB)
    state = mailstate.state(paths.broker_state())
    client = _connect(acct)
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
                state.quarantine(citizen, message_id, sender, why, _subject(info))
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
        logout(client)
    return 200, {"address": acct.user, "uidvalidity": validity, "messages": messages,
                 "quarantined": refused, "more": more}


@route("POST", "/v1/experience/mail/ack")
def ack(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Move what the daemon took (Processed) or refused (Quarantine, with its reason)."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415 - ≈50 ms, mail only

    data = json_body(raw)
    acks = data.get("acks")
    if not isinstance(acks, list) or not all(isinstance(a, dict) and isinstance(
            a.get("uid"), int) and a.get("to") in ("processed", "quarantine") for a in acks):
        raise Refused(400, "invalid_request_error",
                      'acks: a list of {"uid": N, "to": "processed" | "quarantine"}')
    cfg = config_of(citizen)
    acct = account_of(citizen, data)
    state = mailstate.state(paths.broker_state())
    client = _connect(acct)
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
        logout(client)
    for a in quarantined:
        state.quarantine(citizen, header_text(str(a.get("message_id", "?"))),
                         header_text(str(a.get("from", "?"))),
                         header_text(str(a.get("reason", "refused by the citizen"))),
                         header_text(str(a.get("subject", "")))[:300])
    return 200, {"moved": len(done)}


@route("POST", "/v1/experience/mail/wait")
def wait(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """IMAP IDLE for the daemon: {new, uidnext, idle}. `new` at once when mail came
    after the caller's `uidnext` (or it gave none: it has to catch up)."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415 - ≈50 ms, mail only

    data = json_body(raw)
    seen = data.get("uidnext")
    span = data.get("wait_s", 60.0)
    span = min(max(float(span), 0.0), MAX_WAIT_S) if isinstance(span, int | float) else 60.0
    acct = account_of(citizen, data)
    client = _connect(acct)
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
        logout(client)
