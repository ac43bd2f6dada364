"""An incoming mail turned into data: sender, subject, plain text, attachments.

Mail is data, never instructions: nothing here interprets the content. A message
that cannot be read safely raises `BadMail` with the reason, and goes to quarantine.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import getaddresses

from citizen.errors import CitizenError
from shared.webtext import html_to_text

# Defects after which the structure cannot be trusted (the text may be cut or mixed up).
_FATAL_DEFECTS = {"StartBoundaryNotFoundDefect", "CloseBoundaryNotFoundDefect",
                  "MultipartInvariantViolationDefect", "NoBoundaryInMultipartDefect",
                  "FirstHeaderLineIsContinuationDefect"}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0 and C1 controls, DEL


class BadMail(CitizenError, ValueError):
    """A message we will not turn into a task; `reason` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass
class Incoming:
    """One parsed message."""

    message_id: str
    sender: str
    subject: str
    text: str
    references: list[str] = field(default_factory=list)
    recipients: list[str] = field(default_factory=list)  # To and Cc, lower case
    attachments: list[tuple[str, bytes]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _header(msg: EmailMessage, name: str) -> str:
    try:
        header = msg.get(name, "")
        value = str(header or "")
    except (ValueError, LookupError, UnicodeError) as exc:
        raise BadMail(f"undecodable {name} header ({exc})") from exc
    undecodable = any(type(d).__name__ == "UndecodableBytesDefect"
                      for d in getattr(header, "defects", ()))
    # Raw 8-bit bytes surface as surrogates or U+FFFD, depending on the header's kind.
    if undecodable or any("\udc80" <= ch <= "\udcff" or ch == "\ufffd" for ch in value):
        raise BadMail(f"undecodable {name} header (raw non-UTF-8 bytes)")
    # An encoded-word can decode to CR/LF ("hi\r\nBcc: …"): stored as it came, it would be
    # a header injection in the reply (or a ValueError that ends the wake). Every control
    # character becomes a space.
    return " ".join(_CONTROL.sub(" ", value).split())


def sender_of(msg: EmailMessage) -> str:
    """The From address, lower-cased.

    :raises BadMail: no single readable address.
    """
    addresses = [a for _, a in getaddresses([_header(msg, "From")]) if "@" in a]
    if len(addresses) != 1:
        raise BadMail("no single sender address in From")
    return addresses[0].lower()


def message_id_of(msg: EmailMessage, raw: bytes) -> str:
    """The Message-ID, or a stable one derived from the raw headers when it is missing."""
    found = _header(msg, "Message-ID")
    if found:
        return found
    head = raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    return f"<{hashlib.sha256(head).hexdigest()[:32]}@no-message-id.experience>"


def headers(raw: bytes) -> EmailMessage:
    """Parse only the header block (for the checks made before fetching the body)."""
    msg: EmailMessage = BytesParser(policy=policy.default).parsebytes(raw, headersonly=True)
    return msg


def parse(raw: bytes, max_attachment_bytes: int) -> Incoming:
    """Turn raw RFC 5322 bytes into an `Incoming`.

    :raises BadMail: malformed MIME, undecodable headers or body, or no usable text.
    """
    msg: EmailMessage = BytesParser(policy=policy.default).parsebytes(raw)
    defects = {type(d).__name__ for part in msg.walk() for d in part.defects}
    fatal = sorted(defects & _FATAL_DEFECTS)
    if fatal:
        raise BadMail(f"malformed MIME ({', '.join(fatal)})")
    incoming = Incoming(
        message_id=message_id_of(msg, raw),
        sender=sender_of(msg),
        subject=_header(msg, "Subject"),
        text="",
        references=_header(msg, "References").split(),
        recipients=[a.lower() for _, a in getaddresses(
            [_header(msg, "To"), _header(msg, "Cc")]) if "@" in a],
    )
    if defects:
        incoming.notes.append(f"MIME defects tolerated: {', '.join(sorted(defects))}")
    body = msg.get_body(preferencelist=("plain", "html"))
    try:
        if body is not None:
            content = body.get_content()
            incoming.text = (html_to_text(content) if body.get_content_subtype() == "html"
                             else content).strip()
            if body.get_content_subtype() == "html":
                incoming.notes.append("converted from HTML")
    except (LookupError, UnicodeError, ValueError) as exc:
        raise BadMail(f"undecodable body ({exc})") from exc
    if not incoming.text:
        raise BadMail("no usable text (no text/plain or text/html part with content)")
    for part in msg.iter_attachments():
        name = part.get_filename() or "attachment.bin"
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if len(data) > max_attachment_bytes:
            incoming.notes.append(f"attachment {name} ({len(data)} bytes) over the "
                                  f"{max_attachment_bytes}-byte cap: not saved")
            continue
        incoming.attachments.append((name, data))
    return incoming
