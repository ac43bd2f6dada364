"""The commons of a civilization on several servers, served by each server's broker.

Citizens never hold a database login: a citizen asks its own server's broker, which
writes to the civilization's database (`citizen.broker.database`) with its server's
role. Who wrote a record is the caller the kernel names (`SO_PEERCRED`, resolved by
`Broker.caller`), never what the request says; and the database itself refuses a row
for a citizen who does not live on the writing server (row-level security), so even a
broker whose code were changed could not author another server's citizens.

Routes (POST, JSON in and out, under /v1/experience/commons/):

- A record is keyed by its place and its author (each author's namespace: no one takes
  a place before its author). `record/create {key, data}`: a record its author makes
  once (a vote, a step): 409 if the caller made it already. `record/write {key, data}`:
  the caller's record, made or rewritten. Both stamp `author` with the caller.
- `record/read {key, author?}` -> {key, author, data} | 404 (no author: the first
  written there); `record/list {folder}` -> the records directly in a folder, by key
  (at most LIST_MAX; `more` says if cut);
  `record/folders {folder}` -> the names of the folders directly below it.
- `document/read {key}` -> {data, version} (version 0: none yet); `document/hold {key}`
  -> {data, version, token}: the row locked in a transaction the broker holds
  (`citizen.broker.holds`), then `document/put {token, data}` (written, committed) or
  `document/drop {token}` - no update is lost, whichever server writes, one try each.
- `record/stamp {folder}` -> what changes when a record beneath it is written;
  `lease/take {name, seconds}` -> {taken, token}, `lease/give {name, token}`: a lock
  held across a citizen's read-check-write, freed when its holder dies and time is up.
- `ring {citizen, wake_type, reason}`: a `NOTIFY` every server's broker hears
  (`citizen.broker.rings`); the sender is the caller.
- `citizens {}` -> every citizen of the civilization and the server it lives on.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from citizen.access.commons import RINGS_VIEW
from citizen.broker import holds, mailnews, views
from citizen.broker.database import Database
from citizen.broker.mailrules import json_body  # the routes' one JSON-object reader
from citizen.broker.refused import Refused
from citizen.broker.rings import CHANNEL, MAX_WAIT_S
from citizen.broker.server import VIEWS, Broker, route

PREFIX = "/v1/experience/commons/"
# A key is a place in the commons, as a path: a few plain segments (no '.', '..', no
# empty one), so no key can name another's place by spelling it differently.
SEGMENT = re.compile(r"^[A-Za-z0-9_~@+-][A-Za-z0-9._~@+-]{0,127}$")
MAX_DEPTH, MAX_KEY = 8, 512
MAX_RECORD = 1 << 20  # a record is KBs; a megabyte is no record (the body cap is 4 MB)
LIST_MAX = 2000  # one answer's records; a folder holds a thread's steps, not thousands
PAGE_BYTES = 4 << 20  # and one answer's bytes, at most (the citizen's side reads 8 MB)
MAX_RING = 400  # a NOTIFY payload stays small (PostgreSQL's limit is 8000 bytes)
MAX_LEASE_S = 60  # a lease outlives a dead holder by at most this (the flock it stands in for
# waits APPEND_WAIT_S, 30 s: a peer that keeps taking one delays, it never blocks for long)


@contextmanager
def _refusals(broker: Broker) -> Iterator[Database]:
    """The broker's civilization database, its failures as refusals.

    :raises Refused: 404 on a server of its own; 403 what the database refuses this
        server's role (another server's citizen); 503 the database cannot be reached
        (the citizen's step waits and is tried again: nothing was written).
    """
    import psycopg  # noqa: PLC0415 - only a civilization of several servers needs it
    from psycopg_pool import PoolTimeout  # noqa: PLC0415 - 0.2 s to import: same

    if broker.database is None:
        raise Refused(404, "not_found_error", "this server's commons is its own files: no "
                      "civilization.json names a database (DEPLOY.md, several servers)")
    try:
        yield broker.database
    except psycopg.errors.InsufficientPrivilege as exc:
        raise Refused(403, "permission_error", f"the civilization's database refuses this "
                      f"server's role: {exc.diag.message_primary}") from exc
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise Refused(503, "overloaded_error", f"the civilization's database cannot be "
                      f"reached ({exc}); try again later - nothing was written") from exc


@contextmanager
def _conn(broker: Broker) -> Iterator[Any]:
    """A pooled connection (autocommit) to the civilization's database (`_refusals`)."""
    with _refusals(broker) as db, db.connection() as conn:
        yield conn


def key_of(body: dict[str, Any], name: str = "key", *, folder: bool = False) -> str:
    """A valid place in the commons from the request.

    :raises Refused: 400, naming what a key may be.
    """
    value = body.get(name)
    if folder and value == "":
        return ""
    parts = value.split("/") if isinstance(value, str) else []
    if not parts or len(parts) > MAX_DEPTH or len(str(value)) > MAX_KEY \
            or not all(SEGMENT.match(p) and p not in (".", "..") for p in parts):
        raise Refused(400, "invalid_request_error",
                      f"{name} must be a relative path of at most {MAX_DEPTH} plain names "
                      "(letters, digits, . _ ~ @ + -; none empty, '.' or '..')")
    return str(value)


def _data(body: dict[str, Any]) -> dict[str, Any]:
    data = body.get("data")
    if not isinstance(data, dict):
        raise Refused(400, "invalid_request_error", 'send the record as {"data": {…}}')
    if len(json.dumps(data)) > MAX_RECORD:
        raise Refused(413, "request_too_large", f"a record is at most {MAX_RECORD} bytes")
    return data


def _folder(key: str) -> str:
    return key.rpartition("/")[0]


# Records only a broker files (its merge into the baseline, its draw of a change's
# reviewers): a citizen's route refuses these folders, so every row in them is a broker's
# (`citizen.broker.gateway`) - else a citizen could file the draw of its own change first
# and pick its reviewers, or a merge record for a commit no review passed.
BROKERS_ONLY = frozenset({"merged", "draws"})


def _citizens_place(key: str) -> None:
    """:raises Refused: 403, the key is in a folder only a broker files in."""
    if key.split("/", 1)[0] in BROKERS_ONLY:
        raise Refused(403, "permission_error", f"{key}: only a broker files records in "
                      f"{key.split('/', 1)[0]}/ (it merges and draws; ask it through its "
                      "routes)")


def _row(key: str, author: str, data: Any) -> dict[str, Any]:
    return {"key": key, "author": author, "data": {**data, "author": author}}


@route("POST", PREFIX + "record/create", commons=True)
def create(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    return file_once(broker, citizen, raw)


@route("POST", PREFIX + "record/write", commons=True)
def write(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    return file_own(broker, citizen, raw)


def _filing(citizen: str, raw: bytes, filed_by_broker: bool) -> tuple[str, dict[str, Any]]:
    """The key and the record a create or write files: `author` the caller's, and in a
    folder a citizen may file in unless the broker files it (BROKERS_ONLY)."""
    body = json_body(raw)
    key, data = key_of(body), _data(body)
    if not filed_by_broker:
        _citizens_place(key)
    return key, {**data, "author": citizen}


def file_once(broker: Broker, citizen: str, raw: bytes, *, filed_by_broker: bool = False
              ) -> tuple[int, Any]:
    """record/create; `filed_by_broker`: the broker's own record (BROKERS_ONLY)."""
    key, record = _filing(citizen, raw, filed_by_broker)
    with _conn(broker) as conn:
        row = conn.execute(
            "INSERT INTO records (key, folder, author, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (key, author) DO NOTHING RETURNING key",
            (key, _folder(key), citizen, json.dumps(record))).fetchone()
    if row is None:
        raise Refused(409, "invalid_request_error", f"{key} is already recorded by "
                      f"{citizen}; a step is taken once")
    return 200, _row(key, citizen, record)


def file_own(broker: Broker, citizen: str, raw: bytes, *, filed_by_broker: bool = False
             ) -> tuple[int, Any]:
    """record/write; `filed_by_broker`: the broker's own record (BROKERS_ONLY)."""
    key, record = _filing(citizen, raw, filed_by_broker)
    with _conn(broker) as conn:
        # The caller's own row at the key: another author's there stays as it is.
        conn.execute(
            "INSERT INTO records (key, folder, author, data) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (key, author) DO UPDATE SET data = EXCLUDED.data, written = "
            "clock_timestamp()", (key, _folder(key), citizen, json.dumps(record)))
    return 200, _row(key, citizen, record)


@route("POST", PREFIX + "record/read", commons=True)
def read(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """{key, author?}: that author's record at the key, or (no author named) the first
    written there."""
    body = json_body(raw)
    key, author = key_of(body), body.get("author")
    if author is not None and not isinstance(author, str):
        raise Refused(400, "invalid_request_error", "author is a citizen's name")
    with _conn(broker) as conn:
        row = conn.execute("SELECT author, data FROM records WHERE key = %s AND (%s::text IS "
                           "NULL OR author = %s) ORDER BY written, author LIMIT 1",
                           (key, author, author)).fetchone()
    if row is None:
        raise Refused(404, "not_found_error", f"no record {key}" + (f" by {author}"
                                                                    if author else ""))
    return 200, _row(key, row[0], row[1])


def _beneath(folder: str) -> str:
    """A LIKE pattern for every folder below `folder`, its own wildcards escaped ('_' is
    a key's letter, not "any one")."""
    prefix = f"{folder}/" if folder else ""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@route("POST", PREFIX + "record/list", commons=True)
def listing(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """{folder, deep?, after?}: a page of the records by (key, author); `after` is the
    last page's last [key, author], and `more` says whether to ask for the next."""
    body = json_body(raw)
    folder, deep, after = key_of(body, "folder", folder=True), body.get("deep") is True, \
        body.get("after") or ["", ""]
    if not (isinstance(after, list) and len(after) == 2 and all(isinstance(a, str)
                                                                for a in after)):
        raise Refused(400, "invalid_request_error", "after is the last [key, author] listed")
    with _conn(broker) as conn:
        rows = conn.execute("SELECT key, author, data FROM records WHERE (folder = %s "
                            "OR (%s AND folder LIKE %s)) AND (key, author) > (%s, %s) "
                            "ORDER BY key, author LIMIT %s",
                            (folder, deep, _beneath(folder), after[0], after[1],
                             LIST_MAX + 1)).fetchall()
    page: list[dict[str, Any]] = []
    size = 0
    for r in rows[:LIST_MAX]:  # a page is also at most PAGE_BYTES (a change's bundle is
        size += len(json.dumps(r[2]))  # a record of up to ~0.9 MB): never past the reader's cap
        if page and size > PAGE_BYTES:
            return 200, {"records": page, "more": True}
        page.append(_row(*r))
    return 200, {"records": page, "more": len(rows) > LIST_MAX}


@route("POST", PREFIX + "record/stamp", commons=True)
def stamp(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """What changes whenever a record is added or rewritten beneath a folder: how many
    there are and the newest write (a thread's signature, for what is owed)."""
    folder = key_of(json_body(raw), "folder")
    with _conn(broker) as conn:
        row = conn.execute("SELECT count(*), coalesce(floor(extract(epoch FROM max(written))"
                           " * 1e6), 0)::bigint FROM records WHERE folder = %s OR folder "
                           "LIKE %s", (folder, _beneath(folder))).fetchone()
    return 200, {"stamp": [int(row[0]), int(row[1])] if row else [0, 0]}


@route("POST", PREFIX + "record/folders", commons=True)
def folders(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    folder = key_of(json_body(raw), "folder", folder=True)
    prefix = f"{folder}/" if folder else ""
    with _conn(broker) as conn:
        rows = conn.execute(
            "SELECT DISTINCT split_part(substr(folder, %s), '/', 1) AS name FROM records "
            "WHERE folder LIKE %s ORDER BY name LIMIT %s",
            (len(prefix) + 1, _beneath(folder), LIST_MAX)).fetchall()
    return 200, {"folders": [r[0] for r in rows if r[0]]}


@route("POST", PREFIX + "document/read", commons=True)
def document_read(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    key = key_of(json_body(raw))
    with _conn(broker) as conn:
        row = conn.execute("SELECT data, version FROM documents WHERE key = %s",
                           (key,)).fetchone()
    return 200, {"key": key, "data": row[0] if row else None, "version": row[1] if row else 0}


@route("POST", PREFIX + "document/hold", commons=True)
def document_hold(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    key = key_of(json_body(raw))
    with _refusals(broker) as db:
        return 200, holds.of(db).hold(citizen, key)


@route("POST", PREFIX + "document/put", commons=True)
def document_put(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    body = json_body(raw)
    data, token = _data(body), body.get("token")
    if not isinstance(token, str):
        raise Refused(400, "invalid_request_error", "send the token document/hold gave")
    with _refusals(broker) as db:
        return 200, {"version": holds.of(db).put(citizen, token, data)}


@route("POST", PREFIX + "document/drop", commons=True)
def document_drop(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    token = json_body(raw).get("token")
    if not isinstance(token, str):
        raise Refused(400, "invalid_request_error", "send the token document/hold gave")
    with _refusals(broker) as db:
        holds.of(db).drop(citizen, token)
    return 200, {"dropped": True}


@route("POST", PREFIX + "lease/take", commons=True)
def lease_take(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Take the lease `name` for `seconds` if nobody holds it (or its holder's time is
    up): {taken: true, token} - or {taken: false}: ask again."""
    body = json_body(raw)
    name, seconds = key_of(body, "name"), body.get("seconds")
    if not isinstance(seconds, int | float) or not 0 < seconds <= MAX_LEASE_S:
        raise Refused(400, "invalid_request_error", f"a lease is 0-{MAX_LEASE_S} seconds")
    token = secrets.token_hex(8)
    with _conn(broker) as conn:
        # One statement: a free or expired lease is taken; a held one is not touched.
        row = conn.execute(
            "INSERT INTO leases (name, holder, token, until) VALUES (%s, %s, %s, "
            "clock_timestamp() + make_interval(secs => %s)) ON CONFLICT (name) DO UPDATE "
            "SET holder = EXCLUDED.holder, token = EXCLUDED.token, until = EXCLUDED.until "
            "WHERE leases.until < clock_timestamp() RETURNING token",
            (name, citizen, token, float(seconds))).fetchone()
    return 200, {"taken": row is not None, "token": token if row else None}


@route("POST", PREFIX + "lease/give", commons=True)
def lease_give(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    """Give back a lease this caller holds under `token` (anyone else's stays)."""
    body = json_body(raw)
    name, token = key_of(body, "name"), body.get("token")
    if not isinstance(token, str):
        raise Refused(400, "invalid_request_error", "send the token lease/take gave")
    with _conn(broker) as conn:
        cur = conn.execute("UPDATE leases SET until = clock_timestamp() - interval '1 us' "
                           "WHERE name = %s AND holder = %s AND token = %s",
                           (name, citizen, token))
    return 200, {"given": cur.rowcount == 1}


@route("POST", PREFIX + "ring", commons=True)
def ring(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    body = json_body(raw)
    target, wake_type = body.get("citizen"), body.get("wake_type")
    if not isinstance(target, str) or not isinstance(wake_type, str):
        raise Refused(400, "invalid_request_error", 'send {"citizen": …, "wake_type": …}')
    payload = json.dumps({"citizen": target, "wake_type": wake_type,
                          "reason": str(body.get("reason", ""))[:200], "sender": citizen})
    if len(payload) > MAX_RING:
        raise Refused(413, "request_too_large", "a ring is a name, a type and a short reason")
    with _conn(broker) as conn:
        row = conn.execute("SELECT server FROM citizens WHERE name = %s", (target,)).fetchone()
        if row is None:
            raise Refused(404, "not_found_error", f"no citizen {target} in this civilization")
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
    return 200, {"rung": target, "server": row[0]}


@route("POST", PREFIX + "citizens", commons=True)
def everyone(broker: Broker, citizen: str, raw: bytes) -> tuple[int, Any]:
    with _conn(broker) as conn:
        rows = conn.execute("SELECT c.name, c.server, s.seen FROM citizens c JOIN servers s "
                            "ON s.name = c.server ORDER BY c.name").fetchall()
    return 200, {"citizens": [{"name": n, "server": s, "server_seen": seen.isoformat()
                               if seen else None} for n, s, seen in rows]}


def rings_view(broker: Broker, uid: int, query: str) -> tuple[int, Any]:
    """The rings heard for this server's citizens, waiting up to `wait` seconds for one:
    root's and the scheduler's only (a citizen would learn who rings whom)."""
    mailnews.may_ask(uid, server_mode=broker.server_mode)
    if broker.rings is None:
        raise Refused(404, "not_found_error", "this server hears no rings from others: no "
                      "civilization.json names a database")
    wait = views.params(query, ("wait",)).get("wait", 0)
    if not 0 <= wait <= MAX_WAIT_S:
        raise Refused(400, "invalid_request_error", f"ask ?wait=<0-{MAX_WAIT_S:.0f}>")
    return 200, {"rings": [{"citizen": r.citizen, "wake_type": r.wake_type,
                            "reason": r.reason, "sender": r.sender}
                           for r in broker.rings.take(timeout=wait)]}


VIEWS[RINGS_VIEW] = rings_view
