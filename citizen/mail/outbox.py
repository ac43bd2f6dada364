"""Outgoing mail: replies to mail tasks and the `send_email` tool, through an outbox.

A message is first written to `mail/outbox/` and then sent; one that cannot be sent
yet stays there and the daemon's mail job retries it. So a reply is never lost to
a flaky SMTP server, and a crash between writing and sending only delays it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from citizen.mail.account import Account, MailError, connect_smtp
from citizen.paths import Home
from citizen.tasks import Task, now_iso
from shared import clock
from shared.atomic import append_line, write_bytes

log = logging.getLogger(__name__)


def reply_to_task(task: Task, sender: str) -> EmailMessage:
    """The threaded reply to the mail a task came from, carrying its outcome."""
    meta = task.meta
    subject = str(meta.get("subject", ""))
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = str(meta["from"])
    msg["Subject"] = subject if subject.lower().startswith("re:") else f"Re: {subject}"
    msg["In-Reply-To"] = str(meta["message_id"])
    msg["References"] = " ".join([*meta.get("references", []), str(meta["message_id"])])
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or "experience.local")
    verdict = {"done": "Done", "failed": "I could not finish this",
               "stuck": "I am stuck on this"}.get(task.status, task.status)
    msg.set_content(f"{verdict}.\n\n{task.result}\n\n-- task {task.id}\n")
    return msg


def queue(home: Home, msg: EmailMessage, source: str) -> Path:
    """Put a message in the outbox."""
    name = f"{time.time_ns()}-{source}.eml"
    path = home.dir / "mail" / "outbox" / name
    write_bytes(path, bytes(msg))
    return path


def flush(home: Home, acct: Account) -> tuple[int, str]:
    """Send everything in the outbox; returns (sent, error or '')."""
    outbox = home.dir / "mail" / "outbox"
    pending = sorted(outbox.glob("*.eml")) if outbox.is_dir() else []
    if not pending:
        return 0, ""
    sent = 0
    try:
        server = connect_smtp(acct)
    except MailError as exc:
        log.warning("outbox: %d messages wait: %s", len(pending), exc)
        return 0, str(exc)
    try:
        for path in pending:
            msg = message_from_bytes(path.read_bytes(), policy=policy.default)
            server.send_message(msg)
            append_line(home.dir / "mail" / "sent.jsonl", {
                "ts": now_iso(), "to": str(msg["To"]), "subject": str(msg["Subject"]),
                "source": path.stem.split("-", 1)[1], "message_id": str(msg["Message-ID"])})
            path.unlink()
            sent += 1
    except Exception as exc:  # noqa: BLE001 - whatever failed, the unsent rest stays queued
        log.warning("outbox: sent %d, then %s; the rest waits for the next try", sent, exc)
        return sent, str(exc)
    finally:
        with contextlib.suppress(Exception):  # the connection may be gone
            server.quit()
    return sent, ""


def sent_recently(home: Home, source: str, seconds: float = 3600.0) -> int:
    """How many messages from `source` were sent (or queued) within `seconds`."""
    cutoff = clock.time() - seconds
    count = 0
    log_path = home.dir / "mail" / "sent.jsonl"
    if log_path.exists():
        for line in log_path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if entry.get("source") == source and \
                    clock.epoch(entry["ts"]) >= cutoff:
                count += 1
    outbox = home.dir / "mail" / "outbox"
    if outbox.is_dir():
        count += sum(1 for p in outbox.glob(f"*-{source}.eml"))
    return count


def notice(home: Home, acct: Account, to: str, subject: str, body: str, *,
           in_reply_to: str = "") -> str:
    """Queue a message the daemon sends on its own (e.g. a proposal's outcome to the
    operator who asked for it) and try to send it now."""
    msg = EmailMessage()
    msg["From"] = acct.user
    msg["To"] = to
    msg["Subject"] = subject
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
        msg["References"] = in_reply_to
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain=acct.user.rpartition("@")[2] or "experience.local")
    msg.set_content(body)
    queue(home, msg, "notice")
    sent, error = flush(home, acct)
    return "sent" if sent and not error else f"queued ({error or 'will retry'})"


def answer(home: Home, acct: Account, task: Task) -> str:
    """Queue the threaded reply for a finished mail task and try to send it now."""
    queue(home, reply_to_task(task, acct.user), "reply")
    sent, error = flush(home, acct)
    return "reply sent" if sent and not error else f"reply queued ({error or 'will retry'})"
