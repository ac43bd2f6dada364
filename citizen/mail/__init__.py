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
           "citizen_addresses", "configured"]


def citizen_addresses() -> set[str]:
    """Every citizen's address in this civilization (citizens may mail each other)."""
    from citizen.civilization import citizens  # noqa: PLC0415 - avoids an import cycle

    found = set()
    for name in citizens():
        try:
            found.add(config.load_citizen(name).email.lower())
        except Exception:  # noqa: BLE001, S112 - one bad config must not stop the others' mail
            continue
    return found
