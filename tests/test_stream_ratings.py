"""Ratings of bids move calibration only when someone other than the rated citizen
wrote them - by the kernel's word (the file's owner), never by what the file says."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from shared.errors import Invalid
from shared.streams import Streams

CITIZEN = "nobody"  # a real Unix user that is not this process: the rated citizen
UID = pwd.getpwnam(CITIZEN).pw_uid
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another owner")


def as_citizen(path: Path, record: dict[str, object]) -> Path:
    """What the citizen's own process writes in the commons (its file, its uid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    os.chown(path, UID, -1)
    return path


def bids(streams: Streams, n: int = 3) -> list[str]:
    """`n` streams where the citizen bid at confidence 0.4 (its own decision records)."""
    sids = []
    for i in range(n):
        sid = streams.open(f"<rate-{i}@example.org>", "Who knows backups?").id
        as_citizen(streams.threads.dir(sid) / "records" / f"{CITIZEN}.json",
                   {"author": CITIZEN, "prompt": "p", "claim": True, "confidence": 0.4,
                    "how": "model", "reasoning": "mine"})
        assert streams.read_record(sid, CITIZEN) is not None
        sids.append(sid)
    return sids


def test_a_citizen_rating_its_own_bids_moves_no_calibration(tmp_path: Path) -> None:
    """The attack: the citizen writes ratings of its own bids, score 1 (in its own name,
    and in the old format naming the operator); its calibration used to go to 1.5."""
    streams = Streams(tmp_path, [CITIZEN, "root"], enforce_identity=True)
    sids = bids(streams)
    for n, sid in enumerate(sids):
        ratings = streams.threads.dir(sid) / "ratings"
        as_citizen(ratings / f"{CITIZEN}.json",
                   {"author": CITIZEN, "score": 1.0, "reasoning": "I was right"} if n % 2
                   else {"citizen": CITIZEN, "score": 1.0, "by": "root"})
    assert streams.calibration(CITIZEN) == {"citizen": CITIZEN, "rated": 0, "factor": 1.0}
    assert streams.ratings.rating(sids[0], CITIZEN) is None
    # the operator's ratings (this process, root) count, with its reasoning and name
    for sid in sids:
        streams.rate(sid, CITIZEN, 0.2, "should have stayed silent")
    rating = streams.ratings.rating(sids[0], CITIZEN)
    assert rating is not None and rating["ratedBy"] == "root" and rating["rater"] == "community"
    assert rating["reasoning"] == "should have stayed silent"
    got = streams.calibration(CITIZEN)
    assert got["rated"] == 3 and got["factor"] == 0.5


def test_rating_ones_own_bid_is_refused(tmp_path: Path) -> None:
    """The door itself: the Unix user running `rate` is the rater; it is not the rated."""
    streams = Streams(tmp_path, ["root", CITIZEN], enforce_identity=True)
    sid = streams.open("<self@example.org>", "Who knows backups?").id
    streams.record(sid, "root", {"prompt": "p", "claim": True, "confidence": 0.4})
    with pytest.raises(Invalid, match="own bid"):
        streams.rate(sid, "root", 1.0, "I was right")
    assert not (streams.threads.dir(sid) / "ratings").exists()


def test_the_first_peer_to_rate_does_not_silence_the_others(tmp_path: Path) -> None:
    """Found by a hostile review: one rating file per bid, and its first writer held it -
    a peer (daemon) rating every bid 1.0 first left a later peer's rating (bin's, written
    beside it) unread, and the rated citizen's calibration at the cap. Now each peer's
    rating counts once, and the operator's, when it rates, is the one that counts."""
    streams = Streams(tmp_path, [CITIZEN, "daemon", "bin"], enforce_identity=True)
    sids = bids(streams)
    for sid in sids:
        ratings = streams.threads.dir(sid) / "ratings"
        squat = as_citizen(ratings / f"{CITIZEN}.json",
                           {"author": "daemon", "score": 1.0, "reasoning": "first"})
        os.chown(squat, pwd.getpwnam("daemon").pw_uid, -1)
        late = as_citizen(ratings / f"{CITIZEN}.json~bin-0123456789abcdef",
                          {"author": "bin", "score": 0.0, "reasoning": "wrong to speak"})
        os.chown(late, pwd.getpwnam("bin").pw_uid, -1)
    rating = streams.ratings.rating(sids[0], CITIZEN)
    assert rating is not None and rating["raters"] == ["bin", "daemon"]
    assert rating["score"] == 0.5 and rating["rater"] == "community"
    assert streams.calibration(CITIZEN)["factor"] == 1.25  # 0.5 / 0.4, not the cap 1.5
    streams.rate(sids[0], CITIZEN, 0.0, "the operator's word")  # root: no citizen here
    rating = streams.ratings.rating(sids[0], CITIZEN)
    assert rating is not None and rating["rater"] == "user" and rating["score"] == 0.0
