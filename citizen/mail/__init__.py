"""Mail: tasks arrive by email, answers go back in the same thread."""

from __future__ import annotations

from citizen import config
from citizen.mail.account import (
    SETTINGS,
    Account,
    MailError,
    MailNotConfigured,
    account,
    configured,
)

__all__ = ["SETTINGS", "Account", "MailError", "MailNotConfigured", "account",
           "citizen_addresses", "citizen_directory", "configured"]


def citizen_directory() -> dict[str, str]:
    """Every citizen's address in this civilization → its name (citizens may mail each
    other; a mail to several of them opens one stream)."""
    from citizen.civilization import citizens  # noqa: PLC0415 - avoids an import cycle

    found = {}
    for name in citizens():
        try:
            found[config.load_citizen(name).email.lower()] = name
        except Exception:  # noqa: BLE001, S112 - one bad config must not stop the others' mail
            continue
    return found


def citizen_addresses() -> set[str]:
    return set(citizen_directory())
