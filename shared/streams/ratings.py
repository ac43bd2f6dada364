"""Post-hoc ratings of bids (§9.2 `outcome`) and the calibration they give (§10.2).

    <stream>/ratings/<citizen>.json   a rating of `citizen`'s bid on the stream (a second
                                      rater's goes beside it: `records.write`)

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
        """The rating of `citizen`'s bid on `sid` that counts, or None: the operator's
        when it rated (a rater who is no citizen), else the mean of its peers' - one each.
        Every rater is its file's author by the kernel (the owner in server mode); one
        the subject wrote, or with a score outside 0..1 (written by hand, past `rate()`'s
        check), does not count. Why one per rater: the first peer to rate used to hold
        the bid's only rating file, and a later rater's went beside it unread."""
        def counts(rec: dict[str, Any]) -> bool:
            if rec[records.AUTHOR] == citizen:
                log.warning("ignoring a rating of %s on %s: written by %s itself",
                            citizen, sid, citizen)
                return False
            try:
                score = float(rec["score"])
            except (KeyError, TypeError, ValueError):
                return False
            if not 0.0 <= score <= 1.0:  # NaN too
                log.warning("ignoring a rating of %s on %s: score %r", citizen, sid, score)
                return False
            return True

        path = self._path(sid, citizen)
        found: dict[str, dict[str, Any]] = {}
        for candidate in ([path] if path.is_file() else []) + records.besides(path):
            # `by`: ratings before the one author key named their rater there.
            rec = records.read(candidate, None, self.streams.enforce, legacy=("by",),
                               accept=counts)
            if rec is not None:
                found.setdefault(str(rec[records.AUTHOR]), rec)
        people = {r: rec for r, rec in found.items() if r not in self.streams.citizens}
        if people:
            rater, rec = sorted(people.items())[-1]
            return {**rec, "ratedBy": rater, "rater": "user", "raters": [rater]}
        if not found:
            return None
        raters = sorted(found)
        mean = sum(float(found[r]["score"]) for r in raters) / len(raters)
        first = found[raters[0]]
        return {**first, "score": mean, "ratedBy": ", ".join(raters), "rater": "community",
                "raters": raters,
                "reasoning": " | ".join(str(found[r].get("reasoning", "")) for r in raters)}

    def calibration(self, citizen: str) -> dict[str, Any]:
        """How well a citizen's confidence predicted its ratings: factor = mean rating /
        mean *raw* confidence over rated bids, clamped to [0.5, 1.5] (1.0 until 3
        ratings). Raw: the bid's own confidence, before this factor and the focus,
        temperature and load adjustments. Against the adjusted confidence each factor
        was measured through the one before it, so it settled near the square root of
        the right value (raw 0.8 rated 0.4: 0.71, not 0.5), and it took the room's
        temperature and the citizen's load for over- or under-confidence."""
        pairs = []
        for sid in self.streams.ids():
            rating = self.rating(sid, citizen)
            if rating is None:
                continue
            rec = self.streams.read_record(sid, citizen)
            if rec is None:
                continue
            # records from before the raw confidence was kept: the one they have
            raw = rec.get("raw_confidence", rec.get("confidence", 0.0))
            pairs.append((float(raw), float(rating["score"])))
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
