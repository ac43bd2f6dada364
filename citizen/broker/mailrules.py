"""The operator's mail rules for one citizen, as the broker's mail routes read them.

Only from what no citizen writes: the templates and the operator's
`/etc/experience/<citizen>.json` (in dev mode the home's config, the operator's there),
and the mailbox settings in the broker's own secrets file (citizen.broker.mailbox).
"""

from __future__ import annotations

import contextlib
import grp
import json
import pwd
import re
from email.utils import getaddresses
from typing import Any

from citizen import civilization, config
from citizen.broker import mailbox
from citizen.broker.mailbox import Account, MailboxError, NoMailbox
from citizen.broker.refused import Refused
from citizen.civilization import CITIZENS_GROUP
from citizen.errors import ConfigError

MB = 1024 * 1024
MAX_RECIPIENTS = 20
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def config_of(citizen: str) -> config.CitizenConfig:
    # On a server the citizen's own config.json sets nothing here (the broker's user
    # cannot read a home): the templates and the operator's file, as for model calls.
    try:
        return config.load_citizen(citizen, own=not config.server_mode())
    except ConfigError as exc:
        raise Refused(500, "api_error", f"the broker cannot read {citizen}'s rules: "
                      f"{exc}") from exc


def account_of(citizen: str, body: dict[str, Any]) -> Account:
    timeout = body.get("timeout_s", mailbox.TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        timeout = mailbox.TIMEOUT_S
    try:
        # The caller may ask to give up sooner (a doctor, a test), never to wait longer.
        return mailbox.account(citizen, min(max(float(timeout), 1.0), mailbox.TIMEOUT_S))
    except NoMailbox as exc:
        raise Refused(404, "not_configured", str(exc)) from exc
    except MailboxError as exc:
        raise Refused(500, "api_error", str(exc)) from exc


def citizen_names() -> list[str]:
    if not config.server_mode():
        return civilization.citizens()

    # The users whose primary group is `citizens` (identity.caller's test): root makes
    # them; the broker's user cannot read a home to list them any other way.
    gid = grp.getgrnam(CITIZENS_GROUP).gr_gid
    return sorted(p.pw_name for p in pwd.getpwall() if p.pw_gid == gid)


def allowed(citizen: str, cfg: config.CitizenConfig, own: str) -> set[str]:
    """Who a citizen may mail and take mail from: the operator's allowed senders and
    every citizen's configured address - all from the operator's files, so no citizen
    adds to it - minus its own mailbox (its mail must not loop back in)."""
    found = {a.lower() for a in cfg.mail.allowed_senders}
    for name in citizen_names():
        try:
            found.add((cfg if name == citizen else config_of(name)).email.lower())
        except Refused:  # one citizen's broken file must not stop the others' mail
            continue
    found.discard(own.lower())
    found.discard("")
    return found


def json_body(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        raise Refused(400, "invalid_request_error", f"not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise Refused(400, "invalid_request_error", "send a JSON object")
    return data


def text_field(data: dict[str, Any], key: str, limit: int) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or len(value) > limit:
        raise Refused(400, "invalid_request_error", f"{key} must be text of at most {limit} "
                      "characters")
    return value


def header_text(value: str) -> str:
    # Every control character becomes a space: a CR/LF would be a header injection.
    return " ".join(CONTROL.sub(" ", value).split())


def recipients(data: dict[str, Any]) -> list[str]:
    given = data.get("to")
    items = [given] if isinstance(given, str) else given
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise Refused(400, "invalid_request_error", "to: an address or a list of addresses")
    found = [a.strip().lower() for _, a in getaddresses(items) if a.strip()]
    if not found or len(found) > MAX_RECIPIENTS or any(
            a.count("@") != 1 or CONTROL.search(a) for a in found) or any(
            CONTROL.search(x) for x in items):
        raise Refused(400, "invalid_request_error",
                      f"to: 1 to {MAX_RECIPIENTS} plain addresses (name@domain)")
    return sorted(set(found))


def logout(client: Any) -> None:
    with contextlib.suppress(Exception):  # the connection may already be gone
        client.logout()

