"""Code evolution with its citizens on two servers (shared/evolution.py over
shared/remote.py, shared/change_rows.py): a change announced by opus on server a is
reviewed by mira on server b and aria on a, adopted, and merged into the baseline by a's
broker, which re-derives "verified and held by 2/3" from the database's rows - whose
authors each server's broker stamped and the database checked. Two brokers on one
Debian PostgreSQL (tests/several.py), real git repositories (tests/test_evolution.py's
baseline and clones).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
from pathlib import Path
from typing import Any

import git
import pytest

from citizen.access.client import CITIZEN_HEADER, connect
from citizen.broker import remote
from citizen.broker import repos as _repos  # noqa: F401 - registers the merge route
from citizen.broker import reviews as _reviews  # noqa: F401 - registers the draw route
from citizen.broker.gateway import Gateway
from citizen.config import paths
from shared import baseline as base_records
from shared import clock, gitsafe
from shared.errors import NotAllowed
from shared.evolution import Evolution
from shared.remote import RemoteRefused
from tests.several import SERVERS, Site
from tests.test_evolution import APP, commit, evo
from tests.test_shared_remote import Remote as SharedRemote
from tests.test_shared_remote import clone, nothing, shared_remote

# The fixtures: a baseline with a tiny project cloned by each citizen; a shared remote.
__all__ = ["evo", "shared_remote"]
PEOPLE = ["opus", "aria", "mira"]  # opus and aria on server a, mira on b
HOME = {c: s for s, cs in SERVERS.items() for c in cs}
STARTED = "2026-01-01T00:00:00+00:00"


def ask(site: Site, citizen: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """One POST to a server's broker as `citizen` (dev mode: the header names it)."""
    raw = json.dumps(body).encode()
    with connect(site.socket, 30.0) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: broker\r\n{CITIZEN_HEADER}: {citizen}"
                     f"\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                     "Connection: close\r\n\r\n".encode() + raw)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read() or b"{}")


def seat(sites: dict[str, Site], civ: Path) -> dict[str, Evolution]:
    """Each citizen's own view of evolution, through its own server's broker: its
    announcements ask that broker for the draw and its adoptions for the merge."""

    def step(path: str) -> Any:
        def request(citizen: str, change_id: str) -> None:
            status, answer = ask(sites[HOME[citizen]], citizen, path, {"change_id": change_id})
            if status != 200:
                raise NotAllowed(answer["error"]["message"])
        return request

    return {c: Evolution(paths.shared_dir(), PEOPLE, False, remote=sites[HOME[c]].as_citizen(c),
                         merge_request=step("/v1/experience/baseline/merge"),
                         draw_request=step("/v1/experience/changes/draw"))
            for c in PEOPLE}


def code(civ: Path, citizen: str) -> Path:
    return civ / citizen / "code"


def reviewed(by: dict[str, Evolution], civ: Path, cid: str, peer: str, exit_status: int) -> None:
    """`peer` fetches the change into its own repository (from the bundle record: the
    author's home is another server's), runs it and reports what the run showed."""
    evolution = by[peer]
    change = evolution.get(cid)
    evolution.fetch(change, code(civ, peer))
    assert gitsafe.run(code(civ, peer), "cat-file", "-e", f"{change.commit}^{{commit}}",
                       check=False).returncode == 0
    evolution.record_run(cid, peer, "pytest -q", exit_status, STARTED)
    evolution.report(cid, peer, "worked" if exit_status == 0 else "failed", "ran it",
                     run_required=True)


def announced(by: dict[str, Evolution], civ: Path, author: str, new: str,
              files: dict[str, str] | None = None) -> str:
    commit(git.Repo(code(civ, author)), files or {"app.py": APP.replace("'hi'", new)},
           f"say {new}")
    return by[author].announce(author, code(civ, author), f"say {new}", new).id


def test_a_change_from_a_reviewed_on_b_reaches_the_baseline_both_build_on(
        sites: dict[str, Site], evo: Path) -> None:
    by = seat(sites, evo)
    baseline = evo / "shared" / "baseline"
    cid = announced(by, evo, "opus", "'hello'")
    assert not (evo / "shared" / "changes" / cid).exists()  # rows, not this server's files
    change = by["mira"].get(cid)  # b sees a's announcement and a's broker's draw
    assert change.citizen == "opus" and sorted(change.reviewers) == ["aria", "mira"]
    assert [c.id for c in by["mira"].pending_reviews("mira")] == [cid]
    reviewed(by, evo, cid, "mira", 0)  # on b
    reviewed(by, evo, cid, "aria", 0)  # on a
    assert by["opus"].get(cid).status == "verified_good"
    assert by["mira"].get(cid).counted == {"mira": "worked", "aria": "worked"}
    adopted = by["aria"].adopt(cid, "aria", code(evo, "aria"))  # a's broker merges it
    assert adopted.status == "merged" and adopted.merged is not None
    assert "'hello'" in (baseline / "app.py").read_text()
    head = gitsafe.read_head(baseline)
    assert adopted.merged["baseline_commit"] == head and adopted.merged["by"] == "aria"
    assert by["mira"].get(cid).status == "merged"  # b reads a's merge record
    mira = sites["b"].as_citizen("mira")
    assert base_records.unreviewed(baseline, paths.shared_dir(), False, remote=mira) == []
    # b's broker builds on a's merge (before: "commits no review put there", its own
    # shared/merged/ had no record of a's), with a change of mira's reviewed on a.
    second = announced(by, evo, "mira", "bye", {"bye.py": "def bye():\n    return 'bye'\n"})
    for peer in ("opus", "aria"):
        reviewed(by, evo, second, peer, 0)
    opus = Evolution(paths.shared_dir(), PEOPLE, False, remote=sites["a"].as_citizen("opus"))
    assert opus.adopt(second, "opus", code(evo, "opus")).status == "verified_good"
    status, answer = ask(sites["b"], "mira", "/v1/experience/baseline/merge",
                         {"change_id": second})
    assert status == 200, answer
    assert (baseline / "bye.py").is_file() and "'hello'" in (baseline / "app.py").read_text()
    merged = by["aria"].get(second).merged
    assert merged is not None and merged["baseline_commit"] == gitsafe.read_head(baseline)
    assert gitsafe.run(baseline, "merge-base", "--is-ancestor", head, "main",
                       check=False).returncode == 0
    assert not (evo / "shared" / "merged").exists()  # every merge record is a row


def test_a_forged_review_is_refused_by_the_database(sites: dict[str, Site], evo: Path) -> None:
    by = seat(sites, evo)
    cid = announced(by, evo, "opus", "'hey'")
    report = {"outcome": "worked", "note": "forged", "ts": clock.now()}
    # a's broker writing as mira (b's citizen): its role may author only a's citizens.
    with pytest.raises(RemoteRefused) as refused:
        sites["a"].as_citizen("mira").write(f"changes/{cid}/reports/mira.json", report)
    assert refused.value.status == 403
    with pytest.raises(RemoteRefused) as refused:
        Gateway(sites["a"].broker, "mira").write(f"changes/{cid}/reports/mira.json", report)
    assert refused.value.status == 403
    # aria (a) in mira's name: refused here; a row at mira's place is aria's, not mira's.
    with pytest.raises(NotAllowed, match="cannot write a record in mira's name"):
        by["aria"].report(cid, "mira", "worked", "forged")
    sites["a"].as_citizen("aria").write(f"changes/{cid}/reports/mira.json", report)
    assert "mira" not in by["opus"].get(cid).reports
    reviewed(by, evo, cid, "mira", 0)  # mira still files her own
    assert by["opus"].get(cid).reports["mira"]["note"] == "ran it"


def test_a_change_short_of_its_reviews_is_not_merged(sites: dict[str, Site], evo: Path) -> None:
    by = seat(sites, evo)
    baseline = evo / "shared" / "baseline"
    before = gitsafe.read_head(baseline)
    cid = announced(by, evo, "opus", "'howdy'")
    reviewed(by, evo, cid, "mira", 0)  # one of the two runs a verdict needs
    aria = Gateway(sites["a"].broker, "aria")  # an adoption on record, past the tool
    aria.write(f"changes/{cid}/adoptions/aria.json", {"commit": "0" * 40, "ts": clock.now()})
    status, answer = ask(sites["a"], "aria", "/v1/experience/baseline/merge",
                         {"change_id": cid})
    assert status == 409 and "is pending" in answer["error"]["message"], answer
    reviewed(by, evo, cid, "aria", 1)  # a run that failed: a split, no verdict
    status, answer = ask(sites["b"], "mira", "/v1/experience/baseline/merge",
                         {"change_id": cid})
    assert status == 409 and "is unresolved" in answer["error"]["message"], answer
    assert gitsafe.read_head(baseline) == before
    assert base_records.read_merged(paths.shared_dir(), cid, False,
                                    sites["b"].as_citizen("mira")) is None


def test_a_change_too_big_to_travel_is_refused_at_announce(
        sites: dict[str, Site], evo: Path) -> None:
    """A bundle is a record's field between servers, bounded: a bigger one is refused
    before anything is recorded, naming the fix."""
    by = seat(sites, evo)
    blob = base64.b64encode(os.urandom(900_000)).decode()  # incompressible
    commit(git.Repo(code(evo, "opus")), {"blob.txt": blob}, "a blob")
    with pytest.raises(NotAllowed, match="rebase it on the baseline"):
        by["opus"].announce("opus", code(evo, "opus"), "a blob", "bigger")
    assert by["mira"].changes() == []


def test_a_merge_pushed_but_not_recorded_is_recorded_when_asked_again(
        sites: dict[str, Site], evo: Path) -> None:
    """The record is written after the remote took the commit (a row is never deleted);
    when that write fails, the commit on main is this very change, and asking again
    records it instead of refusing it as unreviewed (or merging it twice)."""
    by = seat(sites, evo)
    cid = announced(by, evo, "opus", "'hiya'")
    for peer in ("mira", "aria"):
        reviewed(by, evo, cid, peer, 0)
    aria = Evolution(paths.shared_dir(), PEOPLE, False, remote=sites["a"].as_citizen("aria"))
    assert aria.adopt(cid, "aria", code(evo, "aria")).status == "verified_good"
    brokers = Evolution(paths.shared_dir(), PEOPLE, False,
                        remote=Gateway(sites["a"].broker, "aria"))
    head, record = brokers.apply(cid, "aria")  # merged; then the database failed
    assert record is not None and by["mira"].get(cid).merged is None
    status, answer = ask(sites["b"], "mira", "/v1/experience/baseline/merge",
                         {"change_id": cid})
    assert status == 200 and answer["baseline_commit"] == head, answer
    assert gitsafe.read_head(evo / "shared" / "baseline") == head  # not merged twice
    merged = by["opus"].get(cid).merged
    assert merged is not None and merged["baseline_commit"] == head


def test_the_merge_reaches_the_shared_remote_and_b_builds_on_its_own_copy(
        sites: dict[str, Site], evo: Path, shared_remote: SharedRemote, rules_dir: Path,
        tmp_path: Path) -> None:
    """With the shared remote (tests/test_shared_remote.py): a's broker merges and pushes;
    b's broker's own copy of the baseline fetches it, and counts it as reviewed from the
    database's merge record - where its own shared/merged/ has none (before: refused as
    "commits no review put there")."""
    baseline = evo / "shared" / "baseline"
    release = gitsafe.read_head(baseline)
    assert remote.push(baseline, "baseline", shared_remote.a)  # the release, as a's setup
    (rules_dir / "civilization.json").write_text(json.dumps({
        "remote": shared_remote.url.rstrip("/"), "remote_token": str(shared_remote.a.token_file)}))
    b_copy = Path(clone(f"{shared_remote.url}baseline.git", tmp_path / "b-baseline").working_dir)
    by = seat(sites, evo)
    cid = announced(by, evo, "opus", "'hello'")
    for peer in ("mira", "aria"):
        reviewed(by, evo, cid, peer, 0)
    assert by["aria"].adopt(cid, "aria", code(evo, "aria")).status == "merged"
    merged = gitsafe.read_head(baseline)
    assert shared_remote.head() == merged
    assert remote.sync(b_copy, "baseline", shared_remote.b, nothing) == merged
    assert "'hello'" in (b_copy / "app.py").read_text()
    mira = sites["b"].as_citizen("mira")
    b_shared = tmp_path / "b-shared"  # b's own commons: no merge record of a's there
    assert base_records.unreviewed(b_copy, b_shared, False, release, remote=mira) == []
    assert base_records.unreviewed(b_copy, b_shared, False, release) == [merged]


def test_a_server_joining_keeps_the_merges_it_made_alone(
        sites: dict[str, Site], evo: Path) -> None:
    """Merges a server made on its own are its broker's files; after it joins, they
    still count as reviewed beside every server's rows (else its next merge is refused)."""
    baseline = evo / "shared" / "baseline"
    alone = commit(git.Repo(baseline), {"app.py": APP.replace("'hi'", "'yo'")}, "merged alone")
    base_records.write_merged(evo / "shared", "opus-0123456789", {
        "change": "opus-0123456789", "baseline_commit": alone, "by": "aria"})
    mira = sites["b"].as_citizen("mira")
    assert base_records.unreviewed(baseline, evo / "shared", False, remote=mira) == []
    stray = commit(git.Repo(baseline), {"app.py": APP}, "no review")
    assert base_records.unreviewed(baseline, evo / "shared", False, remote=mira) == [stray]
