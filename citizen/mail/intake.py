"""Mail intake: each new message from an allowed sender becomes exactly one task.

A person's mail addressed to several citizens opens one stream (its Message-ID): each
of them holds the task and bids, and only the citizens the decision grants take it up
(the STREAM wake releases or dismisses the held task).

Never lost, never twice. A message leaves the INBOX only after its task exists; the
Message-ID ledger and a task id derived from the message make a retry after a crash
(between writing the task and moving the message) find the task instead of writing
a second one. Anything that cannot safely become a task goes to the quarantine
folder with its reason recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from citizen import civilization
from citizen.config import CitizenConfig
from citizen.mail import routes
from citizen.mail.account import Account, MailError, connect_imap
from citizen.mail.message import BadMail, headers, message_id_of, parse, sender_of
from citizen.paths import Home
from citizen.tasks import TaskQueue, now_iso
from shared.atomic import append_line, write_bytes
from shared.errors import SharedError

log = logging.getLogger(__name__)

# Renew IDLE this often: servers drop it after ~30 min, and a server that died mid-IDLE
# is only noticed on the next command (its socket may just stay silent).
IDLE_RENEW_S = 60.0
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
    """Reads one citizen's INBOX into its task queue."""

    def __init__(self, home: Home, config: CitizenConfig, account: Account,
                 citizens: Mapping[str, str]) -> None:
        """`citizens`: every citizen's address → name (`mail.citizen_directory()`)."""
        self.home = home
        self.config = config
        self.account = account
        self.citizens = {a.lower(): n for a, n in citizens.items()}
        self.allowed = {a.lower() for a in (*config.mail.allowed_senders, *self.citizens)}
        self.allowed.discard(account.user.lower())  # its own replies never loop back in
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
        path = self.dir / "quarantine.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]

    # ------------------------------------------------------------ polling

    def poll(self) -> list[Outcome]:
        """Process every message in the INBOX once.

        :raises MailError: the server could not be reached or refused the login.
        """
        with self.lock:
            client = connect_imap(self.account)
            try:
                return self._poll(client)
            except (OSError, TimeoutError) as exc:
                raise MailError(f"IMAP connection to {self.account.imap} broke: {exc}") from exc
            finally:
                with contextlib.suppress(Exception):  # the connection may already be gone
                    client.logout()

    def _poll(self, client: Any) -> list[Outcome]:
        for folder in (self.config.mail.processed_folder, self.config.mail.quarantine_folder):
            if not client.folder_exists(folder):
                client.create_folder(folder)
        client.select_folder("INBOX")
        uids = client.search("ALL")
        ledger = self.ledger()
        return [self._one(client, uid, ledger) for uid in uids]

    def _one(self, client: Any, uid: int, ledger: dict[str, str]) -> Outcome:  # noqa: PLR0911
        info = client.fetch([uid], ["RFC822.SIZE", "INTERNALDATE",
                                    "BODY.PEEK[HEADER]"])[uid]
        size = int(info[b"RFC822.SIZE"])
        received = info[b"INTERNALDATE"]
        head = headers(info[b"BODY[HEADER]"])
        try:
            message_id = message_id_of(head, info[b"BODY[HEADER]"])
        except BadMail as exc:
            return self._quarantine(client, uid, "?", "?", exc.reason)
        if message_id in ledger:
            self._move(client, uid, self.config.mail.processed_folder)
            return Outcome(uid, message_id, "already-queued", ledger[message_id])
        try:
            sender = sender_of(head)
        except BadMail as exc:
            return self._quarantine(client, uid, message_id, "?", exc.reason)
        if sender not in self.allowed:
            return self._quarantine(client, uid, message_id, sender,
                                    f"unknown sender {sender} (not on the allow-list)")
        cap = int(self.config.mail.max_message_mb * MB)
        if size > cap:  # decided on RFC822.SIZE: the body is never downloaded
            return self._quarantine(client, uid, message_id, sender,
                                    f"over-size: {size} bytes > {cap}")
        raw = client.fetch([uid], ["BODY.PEEK[]"])[uid][b"BODY[]"]
        try:
            mail = parse(raw, int(self.config.mail.max_attachment_mb * MB))
        except BadMail as exc:
            return self._quarantine(client, uid, message_id, sender, exc.reason)
        task_id = _task_id(message_id, received)
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
        self._move(client, uid, self.config.mail.processed_folder)
        held = self.tasks.where(task_id) == "held"  # several citizens got it: bid first
        civilization.commons().ring(self.home.name, "STREAM" if held else kind,
                                    f"mail task {task_id}", sender=mail.sender)
        log.info("mail %s from %s became task %s", message_id, mail.sender, task_id)
        return Outcome(uid, message_id, "task", task_id)

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
        from citizen import civilization  # noqa: PLC0415 - the commons, only when needed

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

    def _quarantine(self, client: Any, uid: int, message_id: str, sender: str,
                    reason: str) -> Outcome:
        self._move(client, uid, self.config.mail.quarantine_folder)
        append_line(self.dir / "quarantine.jsonl", {"ts": now_iso(), "message_id": message_id,
                                                    "from": sender, "reason": reason})
        log.warning("mail %s from %s quarantined: %s", message_id, sender, reason)
        return Outcome(uid, message_id, "quarantined", reason)

    @staticmethod
    def _move(client: Any, uid: int, folder: str) -> None:
        if b"MOVE" in client.capabilities():
            client.move([uid], folder)
        else:
            client.copy([uid], folder)
            client.delete_messages([uid])
            client.expunge()

    # ------------------------------------------------------------ IDLE

    def watch(self, on_new: Callable[[], None], stop: threading.Event) -> None:
        """Wait for new mail with IDLE and call `on_new`; reconnect with backoff on faults."""
        from imapclient.exceptions import IMAPClientError  # noqa: PLC0415

        backoff = 1.0
        while not stop.is_set():
            try:
                client = connect_imap(self.account)
                if b"IDLE" not in client.capabilities():
                    log.info("the IMAP server has no IDLE; relying on the scheduled poll")
                    return
                client.select_folder("INBOX")
                client.idle()
                renewed = time.monotonic()
                backoff = 1.0
                # IDLE reports only what arrives from now on: catch up on anything that
                # came while we were (re)connecting.
                on_new()
                while not stop.is_set():
                    responses = client.idle_check(timeout=min(20.0, self.idle_renew_s))
                    if any(r[1] in (b"EXISTS", b"RECENT") for r in responses if len(r) > 1):
                        client.idle_done()
                        on_new()
                        client.idle()
                        renewed = time.monotonic()
                    elif time.monotonic() - renewed > self.idle_renew_s:
                        client.idle_done()
                        client.idle()
                        renewed = time.monotonic()
            # A server killed mid-IDLE raises IMAPClientAbortError (an IMAPClientError), a
            # frozen one the built-in TimeoutError/OSError: both mean reconnect.
            except (IMAPClientError, OSError, TimeoutError, MailError) as exc:
                log.warning("mail IDLE: %s; reconnecting in %.0f s", exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 300.0)
