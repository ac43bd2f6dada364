"""Mail intake: each new message from an allowed sender becomes exactly one task.

The broker reads the INBOX (citizen.broker.mail): a stranger's mail, one over the size
cap (decided before it is downloaded) and one without a readable sender never reach the
daemon - the broker quarantines them. The rest arrive as raw bytes; each becomes a task,
or goes to quarantine with its reason, and the daemon acknowledges it through the broker,
which moves it to Processed or Quarantine.

A person's mail addressed to several citizens opens one stream (its Message-ID): each
of them holds the task and bids, and only the citizens the decision grants take it up
(the STREAM wake releases or dismisses the held task).

Never lost, never twice. A message leaves the INBOX only after its task exists; the
Message-ID ledger and a task id derived from the message make a retry after a crash
(between writing the task and the acknowledgement) find the task instead of writing
a second one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from citizen import civilization
from citizen.config import CitizenConfig
from citizen.config.paths import Home
from citizen.home.tasks import TaskQueue, now_iso
from citizen.mail import link, routes
from citizen.mail.link import MailError, MailNotConfigured
from citizen.mail.message import BadMail, headers, parse, sender_of
from shared.atomic import append_line, write_bytes
from shared.errors import SharedError

log = logging.getLogger(__name__)

# Renew IDLE this often: servers drop it after ~30 min, and a server that died mid-IDLE
# is only noticed on the next command (its socket may just stay silent).
IDLE_RENEW_S = 60.0
MAX_BATCHES = 50  # one poll takes at most this many broker answers (16 MB each)
MB = 1024 * 1024


@dataclass
class Outcome:
    """What happened to one message."""

    uid: int
    message_id: str
    action: str  # task, quarantined, already-queued
    detail: str


def _task_id(message_id: str, received: datetime) -> str:
    # Deterministic: the same message always maps to the same task id.
    digest = hashlib.sha256(message_id.encode()).hexdigest()[:6]
    return f"t-{received:%Y%m%dT%H%M%S}.000000-{digest}"


class Intake:
    """Reads one citizen's INBOX, through the broker, into its task queue."""

    def __init__(self, home: Home, config: CitizenConfig, citizens: Mapping[str, str],
                 timeout_s: float = link.TIMEOUT_S) -> None:
        """`citizens`: every citizen's address → name (`mail.citizen_directory()`);
        `timeout_s`: how long the broker waits for a silent mail server."""
        self.home = home
        self.name = home.name
        self.config = config
        self.citizens = {a.lower(): n for a, n in citizens.items()}
        self.timeout_s = timeout_s
        self.dir = home.dir / "mail"
        self.tasks = TaskQueue(home.tasks)
        self.lock = threading.Lock()  # the scheduled poll and IDLE never poll at once
        self.idle_renew_s = IDLE_RENEW_S

    # ------------------------------------------------------------ records

    def ledger(self) -> dict[str, str]:
        """Message-ID → task id of every message that became a task."""
        path = self.dir / "ledger.jsonl"
        out: dict[str, str] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line after a crash
                out[entry["message_id"]] = entry["task_id"]
        return out

    def quarantined(self) -> list[dict[str, Any]]:
        """What the mailbox refused, with the reasons (the broker's record)."""
        return link.quarantined(self.name)

    # ------------------------------------------------------------ polling

    def poll(self) -> list[Outcome]:
        """Process every message in the INBOX once.

        :raises MailError: the broker could not reach the mailbox (or refused).
        """
        with self.lock:
            outcomes: list[Outcome] = []
            for _ in range(MAX_BATCHES):
                batch = link.inbox(self.name, self.timeout_s)
                outcomes += [Outcome(int(q["uid"]), str(q["message_id"]), "quarantined",
                                     str(q["reason"])) for q in batch.quarantined]
                ledger = self.ledger()
                acks: list[dict[str, Any]] = []
                try:
                    for incoming in batch.messages:
                        outcome, acked = self._one(incoming, ledger)
                        outcomes.append(outcome)
                        acks.append(acked)
                finally:
                    # Only after the tasks exist: a crash before this leaves the messages
                    # in the INBOX, and the ledger finds their tasks on the next poll.
                    link.ack(self.name, batch.uidvalidity, acks, self.timeout_s)
                if not batch.more or not acks:
                    break
            return outcomes

    def _one(self, incoming: link.Incoming,
             ledger: dict[str, str]) -> tuple[Outcome, dict[str, Any]]:
        uid, message_id = incoming.uid, incoming.message_id
        if message_id in ledger:
            return (Outcome(uid, message_id, "already-queued", ledger[message_id]),
                    {"uid": uid, "to": "processed"})
        try:
            mail = parse(incoming.raw, int(self.config.mail.max_attachment_mb * MB))
        except BadMail as exc:
            try:
                head = headers(incoming.raw)
                sender, subject = sender_of(head), str(head.get("subject", ""))[:300]
            except (BadMail, ValueError, TypeError):
                sender, subject = "?", ""
            log.warning("mail %s from %s quarantined: %s", message_id, sender, exc.reason)
            return (Outcome(uid, message_id, "quarantined", exc.reason),
                    {"uid": uid, "to": "quarantine", "message_id": message_id,
                     "from": sender, "reason": exc.reason, "subject": subject})
        task_id = _task_id(message_id, incoming.received)
        kind = routes.kind_for(mail.subject)
        if self.tasks.where(task_id) is None:
            saved = self._save_attachments(task_id, mail.attachments)
            text = (f"Mail from {mail.sender}\nSubject: {mail.subject}\n\n{mail.text}"
                    + (f"\n\nAttachments saved: {', '.join(saved)}" if saved else "")
                    + (f"\n\n(Note: {'; '.join(mail.notes)})" if mail.notes else ""))
            meta = {"message_id": message_id, "from": mail.sender, "subject": mail.subject,
                    "references": mail.references, "attachments": saved}
            addressed = self._addressed(mail.recipients, mail.sender, kind)
            sid = self._open_stream(message_id, text, addressed, mail.sender) if addressed \
                else None
            if sid is not None:
                meta["stream"] = sid
                self.tasks.hold(text, kind=kind, source="mail", meta=meta, task_id=task_id)
            else:
                self.tasks.add(text, kind=kind, source="mail", meta=meta, task_id=task_id)
        append_line(self.dir / "ledger.jsonl", {"ts": now_iso(), "message_id": message_id,
                                                "task_id": task_id, "from": mail.sender,
                                                "subject": mail.subject})
        held = self.tasks.where(task_id) == "held"  # several citizens got it: bid first
        civilization.commons().ring(self.home.name, "STREAM" if held else kind,
                                    f"mail task {task_id}", sender=mail.sender)
        log.info("mail %s from %s became task %s", message_id, mail.sender, task_id)
        return Outcome(uid, message_id, "task", task_id), {"uid": uid, "to": "processed"}

    def _addressed(self, recipients: list[str], sender: str, kind: str) -> list[str]:
        """The citizens a person's plain task mail reached, when it reached several of
        them (and me): they coordinate through a stream. Otherwise an empty list."""
        names = sorted({self.citizens[a] for a in recipients if a in self.citizens})
        if kind != "TASK" or sender in self.citizens or len(names) < 2 or \
                self.home.name not in names:
            return []
        return names

    def _open_stream(self, message_id: str, text: str, names: list[str],
                     sender: str) -> str | None:
        """The stream's id; None (logged) when it cannot be opened - then the mail is
        an ordinary task here, answered perhaps twice but never lost."""
        try:
            return civilization.streams().open(message_id, text, room="mail",
                                               participants=names, sender=sender,
                                               source="mail").id
        except (SharedError, OSError) as exc:
            log.warning("mail %s: no stream (%s); taking it as an ordinary task", message_id,
                        exc)
            return None

    def _save_attachments(self, task_id: str, attachments: list[tuple[str, bytes]]) -> list[str]:
        saved = []
        for i, (name, data) in enumerate(attachments):
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(name).name)
            path = self.home.tasks / "attachments" / task_id / f"{i}-{safe or 'file'}"
            write_bytes(path, data)
            saved.append(str(path.relative_to(self.home.dir)))
        return saved

    # ------------------------------------------------------------ IDLE

    def watch(self, on_new: Callable[[], None], stop: threading.Event) -> None:
        """Wait for new mail with IMAP IDLE (the broker's, renewed every `idle_renew_s`)
        and call `on_new`; back off while the broker or the server fails."""
        backoff, uidnext = 1.0, None
        while not stop.is_set():
            try:
                # No uidnext yet: the broker answers `new` at once - catch up on anything
                # that came before the watch (or during an outage: uidnext is kept).
                got = link.wait(self.name, uidnext, self.idle_renew_s, self.timeout_s)
            except MailNotConfigured:
                return
            except MailError as exc:
                log.warning("mail IDLE: %s; trying again in %.0f s", exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 300.0)
                continue
            backoff = 1.0
            if not got.get("idle", True):
                log.info("the IMAP server has no IDLE; relying on the scheduled poll")
                return
            if got.get("new"):
                on_new()
            uidnext = int(got["uidnext"])
