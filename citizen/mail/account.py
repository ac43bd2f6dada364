"""A citizen's mailbox settings (from its `.env`) and connections to its servers.

`IMAP_SERVER` and `SMTP_SERVER` are `host` or `host:port`. TLS is on by default:
implicit TLS for IMAP (993), STARTTLS for SMTP (587). `IMAP_TLS` / `SMTP_TLS` may be
`implicit`, `starttls` or `plain`; plain only when set explicitly (e.g. loopback tests).
"""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from typing import Any

from citizen.config import Secrets
from citizen.errors import CitizenError

TLS_MODES = ("implicit", "starttls", "plain")
TIMEOUT_S = 30.0  # a frozen server shows up as a timeout, not a hang


class MailError(CitizenError, RuntimeError):
    """The mailbox could not be reached or refused us."""


class MailNotConfigured(MailError):
    """The citizen has no mailbox settings."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({self.tls})"


@dataclass(frozen=True)
class Account:
    """Where and as whom a citizen reads and sends mail. The password never prints."""

    user: str
    password: str
    imap: Endpoint
    smtp: Endpoint
    timeout_s: float = TIMEOUT_S

    def __repr__(self) -> str:
        return f"Account(user={self.user!r}, imap={self.imap}, smtp={self.smtp})"


def _endpoint(value: str, tls: str, defaults: dict[str, int], key: str) -> Endpoint:
    tls = tls or ("implicit" if key == "IMAP" else "starttls")
    if tls not in TLS_MODES:
        raise MailError(f"{key}_TLS={tls!r} is not one of {', '.join(TLS_MODES)}")
    host, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if not host:
        host, port = value, ""
    try:
        number = int(port) if port else defaults[tls]
    except ValueError as exc:
        raise MailError(f"{key}_SERVER={value!r}: the port is not a number - use host:port") \
            from exc
    return Endpoint(host, number, tls)


SETTINGS = ("IMAP_SERVER", "SMTP_SERVER", "EMAIL_USER", "EMAIL_PASS")


def configured(secrets: Secrets) -> bool:
    """Whether the citizen has a mailbox."""
    return all(secrets.get(k) for k in SETTINGS)


def account(secrets: Secrets, timeout_s: float = TIMEOUT_S) -> Account:
    """The mail account in a citizen's secrets.

    :raises MailNotConfigured: the settings are missing.
    """
    missing = [k for k in SETTINGS if not secrets.get(k)]
    if missing:
        raise MailNotConfigured(f"mail is not configured: set {', '.join(missing)} in the "
                                "citizen's secrets (~/.env; /etc/experience/NAME.env on a server)")
    return Account(
        user=secrets.get("EMAIL_USER"),
        password=secrets.get("EMAIL_PASS"),
        imap=_endpoint(secrets.get("IMAP_SERVER"), secrets.get("IMAP_TLS"),
                       {"implicit": 993, "starttls": 143, "plain": 143}, "IMAP"),
        smtp=_endpoint(secrets.get("SMTP_SERVER"), secrets.get("SMTP_TLS"),
                       {"implicit": 465, "starttls": 587, "plain": 25}, "SMTP"),
        timeout_s=timeout_s,
    )


def connect_imap(acct: Account) -> Any:
    """A logged-in IMAPClient.

    :raises MailError: unreachable, or the login was refused.
    """
    from imapclient import IMAPClient  # noqa: PLC0415 - only for citizens with mail
    from imapclient.exceptions import IMAPClientError, LoginError  # noqa: PLC0415

    ep = acct.imap
    context = ssl.create_default_context()
    try:
        client = IMAPClient(ep.host, port=ep.port, ssl=ep.tls == "implicit",
                            ssl_context=context, timeout=acct.timeout_s)
        if ep.tls == "starttls":
            client.starttls(context)
        client.login(acct.user, acct.password)
    except LoginError as exc:
        raise MailError(f"IMAP login as {acct.user} at {ep} was refused ({exc}) - check "
                        "EMAIL_USER and EMAIL_PASS in the citizen's secrets") from exc
    except (IMAPClientError, OSError, TimeoutError) as exc:
        raise MailError(f"cannot reach IMAP at {ep}: {exc} - check IMAP_SERVER and "
                        "IMAP_TLS") from exc
    return client


def connect_smtp(acct: Account) -> smtplib.SMTP:
    """A logged-in SMTP connection.

    :raises MailError: unreachable, or the login was refused.
    """
    ep = acct.smtp
    context = ssl.create_default_context()
    try:
        server: smtplib.SMTP
        if ep.tls == "implicit":
            server = smtplib.SMTP_SSL(ep.host, ep.port, timeout=acct.timeout_s, context=context)
        else:
            server = smtplib.SMTP(ep.host, ep.port, timeout=acct.timeout_s)
            if ep.tls == "starttls":
                server.starttls(context=context)
        server.login(acct.user, acct.password)
    except smtplib.SMTPAuthenticationError as exc:
        raise MailError(f"SMTP login as {acct.user} at {ep} was refused - check EMAIL_USER "
                        "and EMAIL_PASS in the citizen's secrets") from exc
    except (smtplib.SMTPException, OSError, TimeoutError) as exc:
        raise MailError(f"cannot reach SMTP at {ep}: {exc} - check SMTP_SERVER and "
                        "SMTP_TLS") from exc
    return server
