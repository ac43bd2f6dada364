"""Threads: the records of the commons' protocols (consensus, debates, streams), by thread.

A thread is a directory `<root>/<id>/` holding
- a header (`request.json`, `thread.json`, `stream.json` …) written once by whoever
  opened the thread, and
- step records, each a file written once by its author, owned by the author's Unix
  user and naming it under `author` (the one author key).

Nothing in a thread is ever edited: a change of state is a new record, and the state
is derived from the records by the protocol's pure rules. On several servers
(`remote`, `shared.remote`) the same records are rows the citizen's broker keeps, under
the same names: a thread is a folder of keys, a record is created once, and its author
is the one the broker's kernel named. `write` is the only way a
step is recorded (it carries the authorship check); `read` the only way one is read
back - through `shared.records.read`, the one reader of the commons (a record whose
file is not its author's is ignored, logged).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from shared import clock, records
from shared.atomic import CorruptFile, create_json, make_dirs, read_json
from shared.errors import NotAllowed, NotFound
from shared.records import (
    ALT,
    AUTHOR,
    DIR_MODE,
    RECORD_MODE,
    beside,
    effective_user,
    id_pattern,
    new_id,
)
from shared.remote import Remote, Taken, key, under

log = logging.getLogger(__name__)
T = TypeVar("T")

OPERATOR = "operator"  # the author of records root writes on a person's behalf
# Where a record was written (thread id, record name), stored in it: the owner of a
# thread's directory may rename the records in it, and a renamed record must not count
# as another step (a round-1 reject moved to round 2) or another thread's.
PLACE = "written_as"


class Threads:
    """The threads of one protocol under `root` (e.g. `shared/debates`)."""

    def __init__(self, root: Path, prefix: str, header: str, *, top: Path, enforce: bool,
                 pattern: re.Pattern[str] | None = None, what: str = "thread",
                 lister: str = "", remote: Remote | None = None) -> None:
        self.root = root
        self.prefix = prefix
        self.header_name = header
        self.top = top  # directories are made (with DIR_MODE) up to here
        self.enforce = enforce  # server mode: authorship is the file's owner
        self.pattern = pattern or id_pattern(prefix)
        self.what = what  # "proposal", "debate": for messages
        self.lister = lister  # the command that lists them, for "no such …" messages
        self._owed_cache: dict[str, tuple[tuple[int, ...], str]] = {}
        self.remote = remote
        # Records read through `remote`, by (key, author): a thread's record is created
        # once and never rewritten, so one read is good for the process's life (bounded).
        self._seen: dict[tuple[str, str], dict[str, Any]] = {}

    def key(self, path: Path) -> str:
        return key(self.top, path)

    # ---------------------------------------------------------------- layout

    def dir(self, tid: str) -> Path:
        return self.root / tid

    def ids(self) -> list[str]:
        """Every thread's id, oldest first."""
        if self.remote is not None:
            return sorted(n for n in self.remote.folders(self.key(self.root))
                          if self.pattern.match(n))
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if self.pattern.match(p.name))

    def new_id(self) -> str:
        return new_id(self.prefix)

    def exists(self, tid: str) -> bool:
        if not self.pattern.match(tid):
            return False
        if self.remote is not None:
            return self._remote_read(self.dir(tid) / self.header_name) is not None
        return (self.dir(tid) / self.header_name).is_file()

    # ---------------------------------------------------------------- header

    def open(self, body: Mapping[str, Any], tid: str = "") -> str:
        """Create a thread with its header; returns its id.

        :raises NotAllowed: `tid` is not a new id of this kind.
        """
        tid = tid or new_id(self.prefix)
        if self.remote is not None and self.pattern.match(tid):
            try:
                self.remote.create(self.key(self.dir(tid) / self.header_name),
                                   {"id": tid, **body, "ts": clock.now()})
            except Taken as exc:
                raise NotAllowed(f"'{tid}' is not a new {self.what} id") from exc
            return tid
        if not self.pattern.match(tid) or self.dir(tid).exists():
            raise NotAllowed(f"'{tid}' is not a new {self.what} id")
        make_dirs(self.dir(tid), self.top, DIR_MODE)
        create_json(self.dir(tid) / self.header_name, {"id": tid, **body, "ts": clock.now()},
                    mode=RECORD_MODE)
        return tid

    def header(self, tid: str) -> dict[str, Any]:
        """The thread's header.

        :raises NotFound: there is no such thread.
        :raises CorruptFile: its header does not parse (kept for inspection).
        """
        if not self.exists(tid):
            hint = f" - `{self.lister}` lists them" if self.lister else ""
            raise NotFound(f"no {self.what} {tid}{hint}")
        if self.remote is not None:
            rec = self._remote_read(self.dir(tid) / self.header_name)
            if rec is None:
                raise NotFound(f"no {self.what} {tid}")
            return dict(rec["data"])
        # beneath: the thread's folder is its opener's, who could swap it for a link.
        data: dict[str, Any] = read_json(self.dir(tid) / self.header_name, beneath=self.root)
        return data

    # ---------------------------------------------------------------- records

    def write(self, tid: str, name: str, author: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Record one step, once: `body` with `author` and the time added.

        The authorship check: in server mode only `author` itself (or root, for the
        operator) may write a record naming `author`; the file it creates is then owned
        by the author, which is what every reader checks.

        :raises NotAllowed: the record exists already (a step is taken once), or a file
            that is not the author's blocks it, or the writer is not the author.
        """
        if self.enforce:
            me = effective_user()
            if me != author and not (os.geteuid() == 0 and author == OPERATOR):
                raise NotAllowed(f"{me} cannot write a record in {author}'s name")
        record = {**body, AUTHOR: author, "ts": clock.now(), PLACE: f"{tid}/{name}"}
        path = self.dir(tid) / name
        if self.remote is not None:
            if author != self.remote.citizen:  # the broker would stamp its caller anyway
                raise NotAllowed(f"{self.remote.citizen} cannot write a record in "
                                 f"{author}'s name")
            try:
                self.remote.create(self.key(path), record)
            except Taken as exc:
                raise NotAllowed(f"{tid}: {name} is already recorded; a step is taken once"
                                 ) from exc
            return record
        make_dirs(path.parent, self.top, DIR_MODE)
        try:
            create_json(path, record, mode=RECORD_MODE)
        except FileExistsError as exc:
            if self.read(tid, name, author) is not None:
                raise NotAllowed(f"{tid}: {name} is already recorded; a step is taken once"
                                 ) from exc
            if not self.enforce:  # dev mode: one Unix user, nobody to tell apart
                raise NotAllowed(f"{tid}: {path} exists but does not name {author}: a "
                                 "broken record blocks this step - remove it") from exc
            # Pre-created in the author's name by someone else: the author records the step
            # beside it, under a name nobody can guess in advance, and readers take the
            # file the author owns (`read`).
            alt = beside(path, author)
            log.warning("%s was pre-created by uid %d; %s records %s instead", path,
                        path.stat().st_uid, author, alt.name)
            create_json(alt, record, mode=RECORD_MODE)
        return record

    def read(self, tid: str, name: str, author: str | None = None,
             accept: Callable[[dict[str, Any]], bool] | None = None,
             legacy: tuple[str, ...] = records.LEGACY_AUTHOR_KEYS) -> dict[str, Any] | None:
        """A record if it is whole, names its author, and (in server mode) its file is the
        author's. `author` None: whoever it names, if that one owns it; `accept` may
        demand more (who owes the step). None otherwise (a forged or broken record is
        logged and ignored). A record written beside a pre-created forgery (`write`)
        counts as the one it stands in for. `legacy`: `records.read`'s."""
        where = f"{tid}/{name}"

        def placed(rec: dict[str, Any]) -> bool:
            if rec.get(PLACE, where) != where:
                log.warning("ignoring %s/%s: it was written as %s", tid, name, rec[PLACE])
                return False
            return accept is None or accept(rec)

        if self.remote is not None:
            # The author's own row at the name (the broker's word on who wrote it: the
            # kernel's, on its server); a peer's row there is not it.
            rec = self._remote_read(self.dir(tid) / name, author)
            if rec is None:
                return None
            data = {**rec["data"], AUTHOR: str(rec["author"])}
            return data if placed(data) else None
        return records.read(self.dir(tid) / name, author, self.enforce, legacy=legacy,
                            accept=placed, beneath=self.root)

    def names(self, tid: str, glob: str) -> list[str]:
        """Record names in a thread matching `glob` (may include a subdirectory), sorted;
        a record written beside a forgery is listed under the name it stands in for."""
        folder = self.dir(tid)
        if self.remote is not None:
            shape = PurePosixPath(glob)
            listed = self.remote.records(self.key(folder), deep=True)
            self._keep(listed)
            return sorted({name for name, _ in under(listed, self.key(folder))
                           if len(PurePosixPath(name).parts) == len(shape.parts)
                           and PurePosixPath(name).match(glob)})
        if not folder.is_dir():
            return []
        found = {str(p.relative_to(folder)) for p in folder.glob(glob)}
        found |= {str(p.relative_to(folder)).split(ALT, 1)[0]
                  for p in folder.glob(f"{glob}{ALT}*")}
        return sorted(found)

    # ---------------------------------------------------------------- owed steps

    def owed(self, citizen: str, ids: Iterable[str], owed_by: Callable[[str], str]) -> list[str]:
        """The threads among `ids` whose next step is `citizen`'s.

        `owed_by(tid)` derives a thread and names who owes its next step. Its answer is
        kept while nothing in the thread changes (a new record changes the directory's
        mtime), so asking again - the gate, then each step of a wake - re-derives only
        the threads that moved.
        """
        out = []
        for tid in ids:
            sig = self.signature(tid)
            cached = self._owed_cache.get(tid)
            if cached is not None and cached[0] == sig:
                who = cached[1]
            else:
                try:
                    who = owed_by(tid)
                except (NotFound, CorruptFile) as exc:
                    log.warning("%s %s: %s", self.what, tid, exc)
                    continue
                self._owed_cache[tid] = (sig, who)
            if who == citizen:
                out.append(tid)
        return out

    def forget(self, tid: str | None = None) -> None:
        """Drop what `owed` knows of a thread, or of every thread (after a change outside
        the threads that derivation reads, such as value weights)."""
        if tid is None:
            self._owed_cache.clear()
        else:
            self._owed_cache.pop(tid, None)

    def signature(self, tid: str) -> tuple[int, ...]:
        """Changes whenever a record is added to the thread (its directories' mtimes)."""
        folder = self.dir(tid)
        if self.remote is not None:
            return self.remote.stamp(self.key(folder))
        sig: list[int] = []
        try:
            for d in (folder, *(p for p in folder.iterdir() if p.is_dir())):
                st = d.stat()
                sig += [st.st_mtime_ns, st.st_nlink]
        except FileNotFoundError:
            return ()
        return tuple(sig)


    # ---------------------------------------------------------------- remote

    MAX_SEEN = 20_000  # records kept from the broker's answers (a few MB at most)

    def _keep(self, listed: list[dict[str, Any]]) -> None:
        if len(self._seen) + len(listed) > self.MAX_SEEN:
            self._seen.clear()
        self._seen.update(((str(r["key"]), str(r["author"])), r) for r in listed)

    def _remote_read(self, path: Path, author: str | None = None) -> dict[str, Any] | None:
        """`author`'s record at `path` through the broker ({key, author, data}) - None:
        whoever wrote there first - or None: none there (or no broker: files)."""
        k = self.key(path)
        if (k, author or "") in self._seen:  # "": the first written there never changes
            return self._seen[(k, author or "")]
        rec = self.remote.read(k, author) if self.remote is not None else None
        if rec is not None:
            self._keep([rec])
            if author is None:
                self._seen[(k, "")] = rec
        return rec
