"""Which citizens have new mail: the server scheduler's one question to the broker.

With a daemon each, every daemon waits on its own INBOX (`mail/wait`). Under the one
scheduler (docs/architecture.md §7) no citizen process runs between wakes, and the
scheduler cannot log in anywhere - the mailbox passwords are the broker's. So it asks
here, every minute: `GET /v1/experience/views/mailnews` answers each configured INBOX's
UIDNEXT (a STATUS, nothing fetched, no message read) and the scheduler starts a wake for
a citizen whose number grew; that wake takes the mail in, as the citizen, through
`mail/inbox` as always. Served to root and the scheduler's user (`SO_PEERCRED`, never a
header) and, in dev mode, to the broker's own user; a citizen gets 403 - the numbers
would tell it when another's mail comes.
"""

from __future__ import annotations

import os
import pwd
from typing import Any

from citizen import config
from citizen.access import client
from citizen.admin import schedstore
from citizen.broker import mailbox
from citizen.broker.mailbox import MailboxError, NoMailbox
from citizen.broker.mailrules import citizen_names, logout
from citizen.broker.refused import Refused
from citizen.broker.server import VIEWS, Broker
from citizen.errors import CitizenError, ProviderUnavailable

PATH = "/v1/experience/views/mailnews"
TIMEOUT_S = 10.0  # one INBOX's STATUS: a frozen server costs this, not the whole answer


def may_ask(uid: int, *, server_mode: bool) -> None:
    """:raises Refused: 403, unless `uid` is root, the scheduler's user or (dev mode
    only) the broker's own user."""
    if uid == 0 or (not server_mode and uid == os.geteuid()):
        return
    try:
        scheduler_uid: int | None = pwd.getpwnam(schedstore.USER).pw_uid
    except KeyError:
        scheduler_uid = None
    if uid != scheduler_uid:
        raise Refused(403, "permission_error",
                      f"new-mail numbers are root's and the scheduler's ({schedstore.USER}) only")


def news() -> dict[str, Any]:
    """{"uidnext": {citizen: n}, "errors": {citizen: why}} for every citizen with a
    mailbox; one without is left out."""
    from imapclient.exceptions import IMAPClientError  # noqa: PLC0415 - ≈50 ms, mail only

    found: dict[str, int] = {}
    errors: dict[str, str] = {}
    for name in citizen_names():
        try:
            acct = mailbox.account(name, TIMEOUT_S)
        except NoMailbox:
            continue
        except MailboxError as exc:
            errors[name] = str(exc)
            continue
        try:
            imap = mailbox.connect_imap(acct)
        except MailboxError as exc:
            errors[name] = str(exc)
            continue
        try:
            found[name] = int(imap.folder_status("INBOX", [b"UIDNEXT"])[b"UIDNEXT"])
        except (IMAPClientError, OSError, TimeoutError, KeyError, ValueError) as exc:
            errors[name] = f"IMAP STATUS failed: {exc}"
        finally:
            logout(imap)
    return {"uidnext": found, "errors": errors}


def _view(broker: Broker, uid: int, query: str) -> tuple[int, Any]:
    may_ask(uid, server_mode=broker.server_mode)  # first: a refused caller gets no more
    if query:
        raise Refused(400, "invalid_request_error", "this view takes no parameter")
    return 200, news()


VIEWS[PATH] = _view


def read() -> dict[str, Any]:
    """The scheduler's side: asked of the broker on a server, computed here in dev mode
    (where the mailbox settings are the developer's own).

    :raises CitizenError: the broker does not answer, or refused.
    """
    if not config.server_mode():
        return news()
    try:
        status, answer = client.view(PATH, timeout_s=TIMEOUT_S * 30)
    except ProviderUnavailable as exc:
        raise CitizenError(f"the broker does not answer ({exc}) - systemctl status "
                           "experience-broker") from exc
    if status != 200 or not isinstance(answer, dict):
        raise CitizenError(f"the broker refused the new-mail numbers ({status}): {answer}")
    return answer
