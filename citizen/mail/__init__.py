"""Mail: tasks arrive by email, answers go back in the same thread - all through the
broker (citizen.broker.mail), which alone holds the mailbox password. May import llm,
home, the commons door, access, config and errors; tools are above it."""

from __future__ import annotations

from citizen import config
from citizen.civilization import citizens
from citizen.mail.link import MailError, MailLimited, MailNotConfigured, MailRefused

__all__ = ["SETTINGS", "MailError", "MailLimited", "MailNotConfigured", "MailRefused",
           "citizen_addresses", "citizen_directory", "configured"]

# What a dev-mode process sees of a mailbox in the home's `.env` (EMAIL_PASS it never
# sees: only the broker reads it).
SETTINGS = ("IMAP_SERVER", "SMTP_SERVER", "EMAIL_USER")


def configured(secrets: config.Secrets) -> bool:
    """Whether to ask the broker for this citizen's mail at all: in dev mode when its
    `.env` names a mailbox (so no broker is started for nothing); on a server always -
    the settings are the broker's to read, and it answers `MailNotConfigured`."""
    if config.server_mode():
        return True
    return all(secrets.get(k) for k in SETTINGS)


def citizen_directory() -> dict[str, str]:
    """Every citizen's address in this civilization → its name (citizens may mail each
    other; a mail to several of them opens one stream)."""
    found = {}
    for name in citizens():
        try:
            found[config.load_citizen(name).email.lower()] = name
        except Exception:  # noqa: BLE001, S112 - one bad config must not stop the others' mail
            continue
    return found


def citizen_addresses() -> set[str]:
    return set(citizen_directory())
