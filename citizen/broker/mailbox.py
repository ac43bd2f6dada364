"""A citizen's mailbox as the broker reaches it: the settings, and logged-in connections.

The settings are the operator's: on a server `/etc/experience/<citizen>.env`, which only
the broker's user (and root) can read - never a citizen's home, a credential or the
environment; in dev mode the home's `.env` and the environment, as every dev-mode
process reads them. No citizen's process ever holds `EMAIL_PASS`.

`IMAP_SERVER` and `SMTP_SERVER` are `host` or `host:port`. TLS is on by default:
implicit TLS for IMAP (993), STARTTLS for SMTP (587). `IMAP_TLS` / `SMTP_TLS` may be
`implicit`, `starttls` or `plain`; plain only when set explicitly (e.g. loopback tests).
"""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from typing import Any

from citizen import config
from citizen.config import paths, secrets
from citizen.errors import CitizenError

TLS_MODES = ("implicit", "starttls", "plain")
SETTINGS = ("IMAP_SERVER", "SMTP_SERVER", "EMAIL_USER", "EMAIL_PASS")
TIMEOUT_S = 30.0  # a frozen server shows up as a timeout, not a hang


class MailboxError(CitizenError, RuntimeError):
    """The mailbox could not be reached or refused the broker's login."""


class NoMailbox(MailboxError):
    """The operator configured no mailbox for this citizen."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({self.tls})"


@dataclass(frozen=True)
class Account:
    """Where and as whom the broker reads and sends a citizen's mail. The password
    never prints; `where` names the file the settings came from (for every fix)."""

    user: str
    password: str
    imap: Endpoint
    smtp: Endpoint
    where: str
    timeout_s: float = TIMEOUT_S

    def __repr__(self) -> str:
        return f"Account(user={self.user!r}, imap={self.imap}, smtp={self.smtp})"


def where(name: str) -> str:
    """The file a citizen's mailbox settings belong in, for messages that name the fix."""
    if config.server_mode():
        return str(paths.operator_secrets_file(name))
    return f"{paths.citizen_env_file(name)} (or the environment)"


def settings(name: str) -> dict[str, str]:
    """The citizen's secrets as the broker reads them (module doc)."""
    if config.server_mode():
        path = paths.operator_secrets_file(name)
        return secrets.parse_env(path) if path.is_file() else {}
    return secrets.values(name)


def _endpoint(value: str, tls: str, defaults: dict[str, int], key: str, src: str) -> Endpoint:
    tls = tls or ("implicit" if key == "IMAP" else "starttls")
    if tls not in TLS_MODES:
        raise MailboxError(f"{key}_TLS={tls!r} is not one of {', '.join(TLS_MODES)} - fix it "
                           f"in {src}")
    host, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if not host:
        host, port = value, ""
    try:
        number = int(port) if port else defaults[tls]
    except ValueError as exc:
        raise MailboxError(f"{key}_SERVER={value!r}: the port is not a number - write "
                           f"host:port in {src}") from exc
    return Endpoint(host, number, tls)


def account(name: str, timeout_s: float = TIMEOUT_S) -> Account:
    """Citizen `name`'s mail account.

    :raises NoMailbox: the settings are missing.
    :raises MailboxError: they are malformed.
    """
    values, src = settings(name), where(name)
    missing = [k for k in SETTINGS if not values.get(k)]
    if missing:
        raise NoMailbox(f"{name} has no mailbox: the operator sets {', '.join(missing)} in "
                        f"{src}")
    return Account(
        user=values["EMAIL_USER"], password=values["EMAIL_PASS"],
        imap=_endpoint(values["IMAP_SERVER"], values.get("IMAP_TLS", ""),
                       {"implicit": 993, "starttls": 143, "plain": 143}, "IMAP", src),
        smtp=_endpoint(values["SMTP_SERVER"], values.get("SMTP_TLS", ""),
                       {"implicit": 465, "starttls": 587, "plain": 25}, "SMTP", src),
        where=src, timeout_s=timeout_s)


def connect_imap(acct: Account) -> Any:
    """A logged-in IMAPClient.

    :raises MailboxError: unreachable, or the login was refused.
    """
    from imapclient import IMAPClient  # noqa: PLC0415 - only for citizens with mail
    from imapclient.exceptions import IMAPClientError, LoginError  # noqa: PLC0415 - as above

    ep = acct.imap
    context = ssl.create_default_context()
    try:
        client = IMAPClient(ep.host, port=ep.port, ssl=ep.tls == "implicit",
                            ssl_context=context, timeout=acct.timeout_s)
        if ep.tls == "starttls":
            client.starttls(context)
        client.login(acct.user, acct.password)
    except LoginError as exc:
        raise MailboxError(f"IMAP login as {acct.user} at {ep} was refused ({exc}) - check "
                           f"EMAIL_USER and EMAIL_PASS in {acct.where}") from exc
    except (IMAPClientError, OSError, TimeoutError) as exc:
        raise MailboxError(f"cannot reach IMAP at {ep}: {exc} - check IMAP_SERVER and "
                           f"IMAP_TLS in {acct.where}") from exc
    return client


def connect_smtp(acct: Account) -> smtplib.SMTP:
    """A logged-in SMTP connection.

    :raises MailboxError: unreachable, or the login was refused.
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
        raise MailboxError(f"SMTP login as {acct.user} at {ep} was refused - check "
                           f"EMAIL_USER and EMAIL_PASS in {acct.where}") from exc
    except (smtplib.SMTPException, OSError, TimeoutError) as exc:
        raise MailboxError(f"cannot reach SMTP at {ep}: {exc} - check SMTP_SERVER and "
                           f"SMTP_TLS in {acct.where}") from exc
    return server


def move(client: Any, uids: list[int], folder: str) -> None:
    """Move messages of the selected folder (copy and expunge where MOVE is missing)."""
    if not uids:
        return
    if b"MOVE" in client.capabilities():
        client.move(uids, folder)
    else:
        client.copy(uids, folder)
        client.delete_messages(uids)
        client.expunge()
