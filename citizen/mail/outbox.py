"""Outgoing mail: replies to mail tasks, notices and the `send_email` tool, as requests
to the broker, queued in an outbox.

A request (recipients, subject, text, thread) is first written to `mail/outbox/` and then
handed to the broker, which checks every one again - the operator's permission, the
recipients, the hourly rate - and writes the message itself, From and every header. So
whatever lies in the outbox, planted or not, is only a request: it goes where the citizen
may send, as the citizen, or nowhere. One that cannot go yet (the broker or SMTP down,
the rate reached) stays and the mail job retries it; one refused for good is dropped,
with the reason in `mail/refused.jsonl`. What went out is in `mail/sent.jsonl`.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import getaddresses
from pathlib import Path
from typing import Any

from citizen import config, mail
from citizen.config.paths import Home
from citizen.home.tasks import Task, now_iso
from citizen.mail import link
from shared.atomic import append_line, write_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """What became of one request: sent, refused (for good), limited or waiting."""

    state: str
    detail: str


def request(to: str | Iterable[str], subject: str, body: str, *, in_reply_to: str = "",
            references: Iterable[str] = ()) -> dict[str, Any]:
    """A request for the broker's `mail/send` (it writes the message)."""
    recipients = [to] if isinstance(to, str) else list(to)
    return {"to": recipients, "subject": subject, "body": body, "in_reply_to": in_reply_to,
            "references": list(references)}


def reply_to_task(task: Task) -> dict[str, Any]:
    """The threaded reply to the mail a task came from, carrying its outcome."""
    meta = task.meta
    subject = str(meta.get("subject", ""))
    verdict = {"done": "Done", "failed": "I could not finish this",
               "stuck": "I am stuck on this"}.get(task.status, task.status)
    return request(str(meta["from"]),
                   subject if subject.lower().startswith("re:") else f"Re: {subject}",
                   f"{verdict}.\n\n{task.result}\n\n-- task {task.id}\n",
                   in_reply_to=str(meta["message_id"]),
                   references=[*meta.get("references", []), str(meta["message_id"])])


def queue(home: Home, req: dict[str, Any], source: str) -> Path:
    """Put a request in the outbox; its file."""
    # The id lets the broker recognise a request it already sent (our answer was lost).
    rid = f"{time.time_ns()}-{source}-{secrets.token_hex(4)}"
    path = home.dir / "mail" / "outbox" / f"{rid}.json"
    write_bytes(path, json.dumps({**req, "id": rid, "source": source}).encode())
    return path


def pending(home: Home) -> list[Path]:
    outbox = home.dir / "mail" / "outbox"
    if not outbox.is_dir():
        return []
    return sorted(p for p in outbox.iterdir() if p.suffix in (".json", ".eml"))


def _read(path: Path) -> dict[str, Any]:
    """The request in an outbox file. An `.eml` (an older release queued whole messages)
    gives only its recipients, subject, thread and text: the broker writes the rest.

    :raises ValueError: not a request.
    """
    data = path.read_bytes()
    if path.suffix == ".json":
        req = json.loads(data)
        if not isinstance(req, dict):
            raise ValueError("not a JSON object")
        return {**req, "id": str(req.get("id") or path.stem)}
    msg = message_from_bytes(data, policy=policy.default)
    if not isinstance(msg, EmailMessage):
        raise ValueError("not a message")
    text = msg.get_body(preferencelist=("plain",))
    return {**request([a for _, a in getaddresses([str(msg["To"] or "")]) if a],
                      str(msg["Subject"] or ""), text.get_content() if text else "",
                      in_reply_to=str(msg["In-Reply-To"] or ""),
                      references=str(msg["References"] or "").split()),
            "id": path.stem, "source": path.stem.split("-", 1)[-1]}


def deliver(home: Home, path: Path) -> Delivery:
    """Hand one queued request to the broker; sent and refused ones leave the outbox."""
    mail_dir = home.dir / "mail"
    try:
        req = _read(path)
    except (OSError, ValueError, LookupError) as exc:
        return _refused(home, path, {"id": path.name}, f"unreadable request ({exc})")
    try:
        answer = link.send(home.name, req)
    except (link.MailRefused, link.MailNotConfigured) as exc:
        return _refused(home, path, req, str(exc))
    except link.MailLimited as exc:
        return Delivery("limited", str(exc))
    except link.MailError as exc:
        return Delivery("waiting", str(exc))
    append_line(mail_dir / "sent.jsonl", {
        "ts": now_iso(), "to": ", ".join(answer.get("to", [])), "subject": req.get("subject"),
        "source": req.get("source", ""), "message_id": answer.get("message_id", "")})
    path.unlink(missing_ok=True)
    return Delivery("sent", str(answer.get("message_id", "")))


def _refused(home: Home, path: Path, req: dict[str, Any], why: str) -> Delivery:
    append_line(home.dir / "mail" / "refused.jsonl", {
        "ts": now_iso(), "id": req.get("id"), "to": req.get("to"),
        "subject": req.get("subject"), "source": req.get("source", ""), "reason": why})
    log.warning("outbox: %s refused: %s", path.name, why)
    path.unlink(missing_ok=True)
    return Delivery("refused", why)


def flush(home: Home) -> tuple[int, str]:
    """Hand the whole outbox to the broker, oldest first; (sent, why the rest waits or '')."""
    sent = 0
    for path in pending(home):
        done = deliver(home, path)
        if done.state == "sent":
            sent += 1
        elif done.state in ("limited", "waiting"):  # the rest would wait for the same
            log.warning("outbox: sent %d; the rest waits: %s", sent, done.detail)
            return sent, done.detail
    return sent, ""


def _now(home: Home, req: dict[str, Any], source: str) -> Delivery:
    """Queue a request and hand it to the broker now; then what waited, if it went."""
    if not mail.configured(config.load_secrets(home.name)):  # no broker asked for nothing
        return Delivery("refused", f"{home.name} has no mailbox (set "
                        f"{', '.join(mail.SETTINGS)} and EMAIL_PASS in its .env)")
    path = queue(home, req, source)
    done = deliver(home, path)
    if done.state == "sent":
        flush(home)
    return done


def notice(home: Home, to: str | Iterable[str], subject: str, body: str, *,
           in_reply_to: str = "") -> str:
    """Queue a message the daemon sends on its own (e.g. a proposal's outcome to the
    operator who asked for it) and try to send it now."""
    done = _now(home, request(to, subject, body, in_reply_to=in_reply_to,
                              references=[in_reply_to] if in_reply_to else []), "notice")
    return "sent" if done.state == "sent" else f"{_word(done)} ({done.detail})"


def answer(home: Home, task: Task) -> str:
    """Queue the threaded reply for a finished mail task and try to send it now."""
    done = _now(home, reply_to_task(task), "reply")
    return "reply sent" if done.state == "sent" else f"reply {_word(done)} ({done.detail})"


def _word(done: Delivery) -> str:
    return "refused" if done.state == "refused" else "queued"
