"""Citizens ask for citizens: the broker checks and records the request, root decides.

A citizen whose operator granted `permissions.can_onboard_citizens` asks for a newcomer
(name, focus, strengths, why) with its `citizen_request` tool. The broker - which knows
the caller from the kernel - checks the permission in the operator's rules, the name
(a valid user name nobody has: no Unix user or group, no home, no template citizen, no
open request), the operator's cap on citizens (`max_citizens` in broker.json; open
requests count) and the author's rate (`onboard_requests_per_day`), and records the
request, with its author, in its own state directory. Nothing runs: the operator
lists the requests and approves or rejects each (`citizen onboard --list|--approve|
--reject`, citizen.broker.newcomer), so no privileged automation acts on what a citizen wrote.

Everything in a request is data: it is stored as JSON text, and shown through
`citizen.cli.terminal.clean`; no field reaches a shell.

Routes: `POST /v1/experience/citizens/request`, `GET /v1/experience/citizens/requests`
(the caller's own requests and what became of them).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import threading
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from citizen import civilization, config
from citizen.broker.refused import Refused
from citizen.broker.rules import broker_settings
from citizen.broker.server import Broker, route
from citizen.config import paths
from citizen.errors import ConfigError
from shared import clock
from shared.atomic import CorruptFile, create_json, read_json
from shared.locks import locked

SCHEMA_VERSION = 1
PERMISSION = "can_onboard_citizens"
MAX_CITIZENS = 10  # broker.json `max_citizens` unset: homes and open requests together
REQUESTS_PER_DAY = 1  # broker.json `onboard_requests_per_day` unset: per author, 24 h
DAY_S = 86400.0
# Names that are, or will be, the system's, whether or not such a user exists here yet.
RESERVED = frozenset({"root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail",
                      "news", "uucp", "proxy", "backup", "list", "irc", "nobody", "admin",
                      "operator", "postmaster", "abuse", "www-data", "sshd", "shared",
                      "citizens", "experience", "baseline", "staff", "users", "sudo"})
RESERVED_PREFIXES = ("systemd-", "experience", "_")
FIELDS = {"name", "focus", "strengths", "why"}
MAX_FOCUS, MAX_STRENGTH, MAX_STRENGTHS, MAX_WHY = 200, 60, 8, 2000
OPEN = ("pending",)  # statuses that still hold their name and count against the cap
_ID = re.compile(r"^(\d{4,})-([a-z][a-z0-9_-]{0,30})\.json$")
_lock = threading.Lock()  # one request at a time in this broker (the file lock: root's CLI)


def requests_dir() -> Path:
    """Where the requests live: the broker's state directory (its user's alone, 0700;
    root reads and decides there)."""

    return paths.broker_state() / "onboarding"


@contextmanager
def held() -> Iterator[Path]:
    """The requests directory, locked against the broker's other threads and root's
    decisions (citizen.broker.newcomer)."""
    folder = requests_dir()
    # 0700/0600: the requests are the broker's; root reads them anyway, no citizen can.
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _lock, locked(folder / "requests", mode=0o600):
        yield folder


def all_requests(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every request ever recorded, oldest first.

    :raises CorruptFile: a request file does not parse (kept for inspection).
    """
    folder = folder or requests_dir()
    if not folder.is_dir():
        return []
    found = sorted((int(m[1]), p) for p in folder.iterdir() if (m := _ID.match(p.name)))
    return [dict(read_json(p, SCHEMA_VERSION)) for _, p in found]


def request_path(folder: Path, record: dict[str, Any]) -> Path:
    return folder / f"{record['id']}.json"


# ---------------------------------------------------------------- checks (pure)

def _text(value: Any, field: str, limit: int, *, lines: bool = False) -> str:
    """A field as plain text: a string within `limit`, without control or format
    characters (they would rewrite the operator's terminal or hide text), newlines and
    tabs allowed where `lines`.

    :raises Refused: 400, naming the field and what to send instead.
    """
    if not isinstance(value, str) or not value.strip():
        raise Refused(400, "invalid_request_error", f"'{field}' must be a non-empty string")
    if len(value) > limit:
        raise Refused(400, "invalid_request_error",
                      f"'{field}' is {len(value)} characters; at most {limit}")
    allowed = "\n\t" if lines else ""
    if any(unicodedata.category(c) in ("Cc", "Cf") and c not in allowed for c in value):
        raise Refused(400, "invalid_request_error",
                      f"'{field}' holds control or format characters - send plain text")
    return value.strip()


def parse(body: bytes) -> dict[str, Any]:
    """The request's fields, each checked as text.

    :raises Refused: 400 - not a JSON object of exactly name, focus, strengths, why.
    """
    try:
        data = json.loads(body)
    except ValueError:
        raise Refused(400, "invalid_request_error", "the body must be JSON") from None
    if not isinstance(data, dict) or set(data) - FIELDS or "name" not in data:
        raise Refused(400, "invalid_request_error",
                      f"send a JSON object with {', '.join(sorted(FIELDS))}")
    strengths = data.get("strengths", [])
    if isinstance(strengths, str):
        strengths = [s for s in strengths.split(",") if s.strip()]
    if not isinstance(strengths, list) or len(strengths) > MAX_STRENGTHS:
        raise Refused(400, "invalid_request_error",
                      f"'strengths' must be a list of at most {MAX_STRENGTHS} strings")
    return {"name": data["name"],
            "focus": _text(data.get("focus"), "focus", MAX_FOCUS),
            "strengths": [_text(s, "strengths", MAX_STRENGTH) for s in strengths],
            "why": _text(data.get("why"), "why", MAX_WHY, lines=True)}


def name_problem(name: Any, requests: list[dict[str, Any]]) -> Refused | None:
    """Why `name` cannot be a newcomer's (None: it can). A citizen name becomes a Unix
    user, a home and a directory name, so it must be valid and nobody's already."""
    if not isinstance(name, str) or not paths.NAME_RE.match(name):
        return Refused(400, "invalid_request_error",
                       f"{name!r} is not a valid citizen name - use 1-31 lowercase letters, "
                       "digits, '-' or '_', starting with a letter")
    taken = _taken(name, requests)
    return Refused(409, "invalid_request_error", f"{taken} - choose another name") \
        if taken else None


def _taken(name: str, requests: list[dict[str, Any]]) -> str | None:
    if name in RESERVED or name.startswith(RESERVED_PREFIXES):
        return f"{name} is reserved for the system"
    for kind, lookup in (("Unix user", pwd.getpwnam), ("group", grp.getgrnam)):
        try:
            lookup(name)
        except KeyError:
            continue
        return f"a {kind} named {name} already exists"
    if os.path.lexists(paths.civ_root() / name):  # a citizen's home, or the commons
        return f"{paths.civ_root() / name} exists"
    if name in config.templates().citizen_names():
        return f"{name} is a citizen of the templates, the operator's to onboard"
    if any(r["name"] == name and r["status"] in OPEN for r in requests):
        return f"a request for {name} is already waiting for the operator"
    return None


def citizens_now() -> int:
    """How many citizens this civilization has: on a server the users whose primary
    group is `citizens` (the broker cannot read homes), in dev mode the homes."""
    if config.server_mode():
        return len(civilization.citizen_users())
    return len(civilization.citizens())


def _count(path: Path, data: dict[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Refused(500, "api_error", f"{path}: {key} is {value!r} - the operator sets "
                      "a whole number, 0 or more")
    return value


def limits() -> tuple[int, int]:
    """(max_citizens, onboard_requests_per_day) from the operator's broker.json."""
    try:
        path, data = broker_settings()
    except ConfigError as exc:
        raise Refused(500, "api_error", str(exc)) from exc
    return (_count(path, data, "max_citizens", MAX_CITIZENS),
            _count(path, data, "onboard_requests_per_day", REQUESTS_PER_DAY))


def check_limits(author: str, requests: list[dict[str, Any]], now: float) -> None:
    """The operator's cap on citizens and the author's rate.

    :raises Refused: 403 at the cap, 429 past the rate (with when to ask again).
    """
    cap, per_day = limits()
    waiting = sum(1 for r in requests if r["status"] in OPEN)
    if citizens_now() + waiting >= cap:
        raise Refused(403, "permission_error",
                      f"the civilization is at the operator's cap of {cap} citizens "
                      f"({waiting} requests waiting) - max_citizens in "
                      f"{broker_settings()[0]} decides")
    mine = sorted(clock.epoch(r["requested_at"]) for r in requests if r["author"] == author
                  and now - clock.epoch(r["requested_at"]) < DAY_S)
    if len(mine) >= per_day:
        wait = int(DAY_S - (now - mine[0])) + 1 if mine else int(DAY_S)
        raise Refused(429, "rate_limit_error",
                      f"{author} asked for {len(mine)} citizens in the last 24 hours, the "
                      f"operator's most (onboard_requests_per_day in "
                      f"{broker_settings()[0]})", {"retry-after": str(wait)})


def permitted(author: str) -> None:
    """:raises Refused: 403 - the operator's rules do not grant the permission."""
    try:
        # On a server the operator's files alone (a citizen's own config.json sets no
        # permission); in dev mode the home's config is the developer's.
        cfg = config.load_citizen(author, own=not config.server_mode())
    except ConfigError as exc:
        raise Refused(500, "api_error", f"the broker cannot read {author}'s rules: {exc}") \
            from exc
    if not cfg.permissions.get(PERMISSION, False):
        raise Refused(403, "permission_error",
                      f"{author} may not ask for new citizens - the operator grants "
                      f"permissions.{PERMISSION} in {paths.operator_rules_file(author)}")


# ---------------------------------------------------------------- routes

@route("POST", "/v1/experience/citizens/request")
def request_citizen(broker: Broker, author: str, body: bytes) -> tuple[int, Any]:
    """Record a request for a new citizen, every check passed; the operator decides."""
    permitted(author)
    fields = parse(body)
    with held() as folder:
        try:
            requests = all_requests(folder)
        except CorruptFile as exc:
            raise Refused(500, "api_error", str(exc)) from exc
        problem = name_problem(fields["name"], requests)
        if problem is not None:
            raise problem
        now = clock.time()
        check_limits(author, requests, now)
        seq = max((int(r["id"].split("-", 1)[0]) for r in requests), default=0) + 1
        record = {"schema_version": SCHEMA_VERSION, "id": f"{seq:04d}-{fields['name']}",
                  **fields, "author": author, "requested_at": clock.now(now),
                  "status": "pending"}
        # 0600: the broker's record; root reads it to decide, no citizen reads it.
        create_json(request_path(folder, record), record, mode=0o600)
    return 201, {k: record[k] for k in ("id", "name", "status")} | {
        "next": "the operator approves or rejects it (citizen onboard --list)"}


@route("GET", "/v1/experience/citizens/requests")
def my_requests(broker: Broker, author: str, body: bytes) -> tuple[int, Any]:
    """The caller's requests and what the operator decided."""
    try:
        mine = [r for r in all_requests() if r["author"] == author]
    except CorruptFile as exc:
        raise Refused(500, "api_error", str(exc)) from exc
    keys = ("id", "name", "status", "requested_at", "decided_at", "decision_why")
    return 200, {"requests": [{k: r.get(k) for k in keys} for r in mine]}
