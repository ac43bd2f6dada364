"""What the broker remembers of mail: every send (for the rate, and so a request sent
once is not sent again) and every quarantined message with its reason.

One SQLite file, `mail.db`, in the broker's state directory (0700: its user's alone on a
server), WAL, written by the broker alone - no citizen can reset its count. A send is
reserved (`sending`) before SMTP sees it and counts against the rate from then on;
it becomes `sent`, or is deleted if SMTP refused it. A broker killed mid-send leaves it
`sending`: the next start marks it `orphaned` - still counted (it may have gone out)
and its request id freed, so the daemon's retry sends it (at least once, never lost).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from citizen.errors import CitizenError, LimitReached
from shared import clock

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sends (
    id INTEGER PRIMARY KEY,
    citizen TEXT NOT NULL,
    request_id TEXT,
    ts REAL NOT NULL,
    state TEXT NOT NULL,
    recipients TEXT NOT NULL,
    subject TEXT NOT NULL,
    message_id TEXT NOT NULL DEFAULT '',
    UNIQUE (citizen, request_id)
);
CREATE INDEX IF NOT EXISTS sends_recent ON sends (citizen, ts);
CREATE TABLE IF NOT EXISTS quarantine (
    id INTEGER PRIMARY KEY,
    citizen TEXT NOT NULL,
    ts TEXT NOT NULL,
    message_id TEXT NOT NULL,
    sender TEXT NOT NULL,
    reason TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS quarantine_of ON quarantine (citizen, id);
"""
HOUR_S = 3600.0


class Limited(LimitReached):
    """The citizen's sends of the last hour reached its rate; `retry_after` seconds."""

    def __init__(self, limit: int, retry_after: int) -> None:
        super().__init__(f"the limit of {limit} messages per hour is reached; try later "
                         f"(in {retry_after} s) - the operator sets mail.max_sends_per_hour")
        self.retry_after = retry_after


class InFlight(CitizenError):
    """A send with this request id is under way right now."""


class MailState:
    """The broker's record of mail (module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # check_same_thread=False: one connection for the server's threads, every use
        # under self._lock - which also makes "count, then reserve" one step, so two
        # sends at once cannot both take the last slot of the rate.
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # a commit survives kill -9 of us
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(quarantine)")}
        if "subject" not in columns:  # a ledger from before the dashboard showed subjects
            self._db.execute("ALTER TABLE quarantine ADD COLUMN subject TEXT NOT NULL "
                             "DEFAULT ''")
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("UPDATE sends SET state = 'orphaned', request_id = NULL "
                             "WHERE state = 'sending'")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------ sends

    def sent(self, citizen: str, request_id: str) -> dict[str, Any] | None:
        """The earlier send of this request, if it went out.

        :raises InFlight: it is being sent right now (by a concurrent request).
        """
        with self._lock:
            row = self._db.execute(
                "SELECT state, recipients, message_id FROM sends "
                "WHERE citizen = ? AND request_id = ?", (citizen, request_id)).fetchone()
        if row is None:
            return None
        if row[0] == "sending":
            raise InFlight(request_id)
        return {"to": json.loads(row[1]), "message_id": row[2], "already": True}

    def reserve(self, citizen: str, request_id: str | None, limit: int,
                recipients: list[str], subject: str) -> int:
        """A slot of the citizen's hourly rate for one send; its row id.

        :raises Limited: `limit` sends in the last hour already.
        :raises InFlight: the same request id is being sent right now.
        """
        now = clock.time()
        with self._lock:
            recent = [ts for (ts,) in self._db.execute(
                "SELECT ts FROM sends WHERE citizen = ? AND ts > ? ORDER BY ts",
                (citizen, now - HOUR_S))]
            if len(recent) >= limit:
                oldest = recent[len(recent) - limit] if limit > 0 else now
                raise Limited(limit, max(1, int(oldest + HOUR_S - now) + 1))
            try:
                cur = self._db.execute(
                    "INSERT INTO sends (citizen, request_id, ts, state, recipients, subject) "
                    "VALUES (?, ?, ?, 'sending', ?, ?)",
                    (citizen, request_id, now, json.dumps(recipients), subject[:200]))
            except sqlite3.IntegrityError:
                raise InFlight(request_id or "") from None
            return int(cur.lastrowid or 0)

    def settle(self, row: int, message_id: str) -> None:
        with self._lock:
            self._db.execute("UPDATE sends SET state = 'sent', message_id = ? WHERE id = ?",
                             (message_id, row))

    def release(self, row: int) -> None:
        """SMTP refused it: nothing went out, nothing counts."""
        with self._lock:
            self._db.execute("DELETE FROM sends WHERE id = ?", (row,))

    def sends_within(self, citizen: str, seconds: float = HOUR_S) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM sends WHERE citizen = ? AND ts > ?",
                                    (citizen, clock.time() - seconds)).fetchone()
        return int(n)

    # ------------------------------------------------------------ quarantine

    def quarantine(self, citizen: str, message_id: str, sender: str, reason: str,
                   subject: str = "") -> None:
        """Record a quarantined mail; its subject is a stranger's text, kept bounded (the
        dashboard shows it escaped, so an operator can tell what the mail was about)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO quarantine (citizen, ts, message_id, sender, reason, subject) "
                "VALUES (?, ?, ?, ?, ?, ?)", (citizen, clock.now(), message_id[:300],
                                              sender[:300], reason[:500], subject[:300]))

    def quarantined(self, citizen: str, limit: int = 500) -> list[dict[str, str]]:
        """The citizen's last `limit` quarantined messages, oldest first."""
        with self._lock:
            return _quarantined(self._db, citizen, limit)


_QUARANTINED = ("SELECT ts, message_id, sender, reason, subject FROM quarantine "
                "WHERE citizen = ? ORDER BY id DESC LIMIT ?")


def _quarantined(db: sqlite3.Connection, citizen: str, limit: int) -> list[dict[str, str]]:
    rows = db.execute(_QUARANTINED, (citizen, limit)).fetchall()
    return [{"ts": ts, "message_id": mid, "from": sender, "reason": reason,
             "subject": subject} for ts, mid, sender, reason, subject in reversed(rows)]


# A reader opens the file read-only and cannot add the column: a ledger the broker has
# not opened since the upgrade shows no subject (its broker adds it at its next start).
_EVERY_QUARANTINED = ("SELECT citizen, ts, message_id, sender, reason, {subject} FROM "
                      "quarantine ORDER BY id DESC LIMIT ?")


def quarantined_readonly(directory: Path, limit: int) -> tuple[list[dict[str, str]], bool]:
    """Every citizen's quarantined messages for a reader (the dashboard's view,
    citizen.broker.views): the newest `limit`, oldest first, and whether older ones were
    left off. Read-only, never creating the file; none before the broker quarantined
    anything.

    :raises sqlite3.Error: it cannot be read (on a server only the broker's user may).
    """
    path = directory / "mail.db"
    if not path.exists():
        return [], False
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        columns = {row[1] for row in db.execute("PRAGMA table_info(quarantine)")}
        query = _EVERY_QUARANTINED.format(
            subject="subject" if "subject" in columns else "''")
        rows = db.execute(query, (limit + 1,)).fetchall()
    except sqlite3.OperationalError as exc:  # no quarantine table yet: nothing quarantined
        if "no such table" in str(exc):
            return [], False
        raise
    finally:
        db.close()
    return ([{"citizen": c, "ts": ts, "message_id": mid, "from": sender, "reason": reason,
              "subject": subject}
             for c, ts, mid, sender, reason, subject in reversed(rows[:limit])],
            len(rows) > limit)


_OPEN: dict[Path, MailState] = {}
_OPEN_LOCK = threading.Lock()


def state(directory: Path) -> MailState:
    """The broker's mail state in `directory` (opened once per process: one broker per
    state directory, which its ledger lock guarantees)."""
    path = directory / "mail.db"
    with _OPEN_LOCK:
        found = _OPEN.get(path)
        if found is None:
            found = _OPEN[path] = MailState(path)
        return found
