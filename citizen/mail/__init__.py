"""Mail: tasks arrive by email, answers go back in the same thread."""

from __future__ import annotations

from citizen import config, paths
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
    root = paths.civ_root()
    found = set()
    if root.is_dir():
        for home in root.iterdir():
            if (home / "config.json").is_file():
                try:
                    found.add(config.load_citizen(home.name).email.lower())
                except Exception:  # noqa: BLE001, S112 - one bad config must not stop the others' mail
                    continue
    return found
