"""Post-hoc ratings of bids (§9.2 `outcome`) and the calibration they give (§10.2).

    <stream>/ratings/<citizen>.json   a rating of `citizen`'s bid on the stream

A rating is a record: its author is its file's owner (`shared.records`, checked by the
kernel in server mode), and `ratedBy` is that author, never what the file says. A
rating counts only when its author is not the citizen it rates: a citizen that rates
its own bids (it can write in the commons like anyone) moves no calibration.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from shared import records
from shared.errors import Invalid, NotFound
from shared.threads import Threads

log = logging.getLogger(__name__)
MIN_RATED = 3  # calibration stays 1.0 until this many ratings (§10.2)


class Bids(Protocol):
    """What ratings need of the streams' store (`Streams`): its bids' records."""

    shared: Path
    enforce: bool
    citizens: list[str]
    threads: Threads

    def ids(self) -> list[str]: ...

    def read_record(self, sid: str, citizen: str) -> dict[str, Any] | None: ...


class Ratings:
    """The ratings of one commons' streams."""

    def __init__(self, streams: Bids) -> None:
        self.streams = streams

    def rate(self, sid: str, citizen: str, score: float, reasoning: str = "") -> None:
        """Rate `citizen`'s bid on `sid` (0 = should have stayed silent, 1 = right to
        speak), as the Unix user running this - its `ratedBy`.

        :raises Invalid: a score outside 0..1, or a citizen rating itself.
        :raises NotFound: no such bid to rate.
        """
        if not 0.0 <= score <= 1.0:
            raise Invalid("a rating is between 0 and 1")
        me = records.effective_user()
        if me == citizen:
            raise Invalid(f"{citizen} may not rate its own bid: ratings come from the "
                          f"operator or a peer (`citizen stream rate` as them)")
        if self.streams.read_record(sid, citizen) is None:
            raise NotFound(f"{citizen} has no decision record on {sid} - "
                           f"`citizen stream show {sid}` lists its bidders")
        records.write(self.streams.shared, self._path(sid, citizen), me,
                      {"rated": citizen, "score": score, "reasoning": reasoning[:1000]})

    def rating(self, sid: str, citizen: str) -> dict[str, Any] | None:
        """The rating of `citizen`'s bid on `sid` that counts, with `ratedBy` - its
        author by the kernel (the file's owner in server mode) - or None. One its
        subject wrote does not count (the self-rating that moved calibration)."""
        def by_another(rec: dict[str, Any]) -> bool:
            if rec[records.AUTHOR] == citizen:
                log.warning("ignoring a rating of %s on %s: written by %s itself",
                            citizen, sid, citizen)
                return False
            return True

        # `by`: ratings before the one author key named their rater there.
        rec = records.read(self._path(sid, citizen), None, self.streams.enforce,
                           legacy=("by",), accept=by_another)
        if rec is None:
            return None
        rater = str(rec[records.AUTHOR])
        kind = "community" if rater in self.streams.citizens else "user"
        return {**rec, "ratedBy": rater, "rater": kind}

    def calibration(self, citizen: str) -> dict[str, Any]:
        """How well a citizen's confidence predicted its ratings: factor = mean rating /
        mean confidence over rated bids, clamped to [0.5, 1.5] (1.0 until 3 ratings)."""
        pairs = []
        for sid in self.streams.ids():
            rating = self.rating(sid, citizen)
            if rating is None:
                continue
            rec = self.streams.read_record(sid, citizen)
            if rec is None:
                continue
            try:
                score = float(rating["score"])
            except (KeyError, TypeError, ValueError):
                continue
            if not 0.0 <= score <= 1.0:  # written by hand, past rate()'s check (or NaN)
                log.warning("ignoring a rating of %s on %s: score %r", citizen, sid, score)
                continue
            pairs.append((float(rec.get("confidence", 0.0)), score))
        if len(pairs) < MIN_RATED:
            return {"citizen": citizen, "rated": len(pairs), "factor": 1.0}
        conf = sum(c for c, _ in pairs) / len(pairs)
        score = sum(r for _, r in pairs) / len(pairs)
        factor = 1.0 if conf == 0 else min(1.5, max(0.5, score / conf))
        brier = sum((c - r) ** 2 for c, r in pairs) / len(pairs)
        return {"citizen": citizen, "rated": len(pairs), "mean_confidence": round(conf, 3),
                "mean_rating": round(score, 3), "factor": round(factor, 3),
                "brier": round(brier, 4)}

    def _path(self, sid: str, citizen: str) -> Path:
        return self.streams.threads.dir(sid) / "ratings" / f"{citizen}.json"
