"""The daemon's way to its mailbox: the broker's mail routes (citizen.broker.mail).

A citizen's process never logs in to its mailbox and never holds the password; it asks
the broker, which checks the operator's rules and answers with messages or a refusal.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from citizen.access import client
from citizen.errors import CitizenError, ProviderUnavailable

PREFIX = "/v1/experience/mail"
TIMEOUT_S = 30.0  # how long the broker waits for a silent mail server
_SLACK_S = 30.0  # beyond it, for the broker's own work (a batch of messages to encode)


class MailError(CitizenError, RuntimeError):
    """The broker could not reach the mailbox, or is not answering."""


class MailNotConfigured(MailError):
    """The operator configured no mailbox for this citizen."""


class MailRefused(MailError):
    """The broker refused this request for good (permission, recipient, malformed)."""


class MailLimited(MailError):
    """The citizen's hourly rate of sends is reached; the request may go later."""


@dataclass(frozen=True)
class Batch:
    """One answer of the broker's INBOX: messages to take, and what it quarantined."""

    address: str
    uidvalidity: int
    messages: list[Incoming]
    quarantined: list[dict[str, Any]]
    more: bool


@dataclass(frozen=True)
class Incoming:
    uid: int
    size: int
    message_id: str
    received: datetime
    raw: bytes


def call(name: str, method: str, path: str, payload: dict[str, Any] | None = None,
         timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """One mail request of citizen `name` to the broker; its JSON answer.

    :raises MailError: (or a subclass, by what the broker said) anything but a 200.
    """
    body = {**(payload or {}), "timeout_s": timeout_s} if method == "POST" else None
    try:
        status, data = client.request(name, method, f"{PREFIX}/{path}", body,
                                      timeout_s=timeout_s + _SLACK_S)
    except ProviderUnavailable as exc:
        raise MailError(str(exc)) from exc
    if status == 200 and isinstance(data, dict):
        return data
    error = (data.get("error") or {}) if isinstance(data, dict) else {}
    message = str(error.get("message") or f"the broker answered {status}")
    kind = error.get("type", "")
    if kind == "not_configured":
        raise MailNotConfigured(message)
    if status == 429:
        raise MailLimited(message)
    if status in (400, 403, 413):
        raise MailRefused(message)
    raise MailError(message)


def inbox(name: str, timeout_s: float = TIMEOUT_S) -> Batch:
    """The next batch of the INBOX, screened by the broker."""
    data = call(name, "POST", "inbox", {}, timeout_s)
    return Batch(
        address=str(data.get("address", "")), uidvalidity=int(data["uidvalidity"]),
        messages=[Incoming(uid=int(m["uid"]), size=int(m["size"]),
                           message_id=str(m["message_id"]),
                           received=datetime.fromisoformat(m["received"]),
                           raw=base64.b64decode(m["raw"]))
                  for m in data.get("messages", [])],
        quarantined=list(data.get("quarantined", [])), more=bool(data.get("more")))


def ack(name: str, uidvalidity: int, acks: list[dict[str, Any]],
        timeout_s: float = TIMEOUT_S) -> int:
    """Tell the broker what became of each message (it moves them); how many moved."""
    if not acks:
        return 0
    return int(call(name, "POST", "ack", {"uidvalidity": uidvalidity, "acks": acks},
                    timeout_s)["moved"])


def wait(name: str, uidnext: int | None, wait_s: float,
         timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """IMAP IDLE through the broker: {new, uidnext, idle} within about `wait_s`."""
    return call(name, "POST", "wait", {"uidnext": uidnext, "wait_s": wait_s},
                timeout_s + wait_s)


def send(name: str, request: dict[str, Any]) -> dict[str, Any]:
    """Ask the broker to send one message (outbox.py writes the request)."""
    return call(name, "POST", "send", request)


def quarantined(name: str) -> list[dict[str, Any]]:
    """The messages the citizen's mailbox refused, with the reason for each."""
    return list(call(name, "GET", "quarantine")["rows"])


def check(name: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """Both logins, made by the broker (`citizen doctor`)."""
    return call(name, "POST", "check", {}, timeout_s)
