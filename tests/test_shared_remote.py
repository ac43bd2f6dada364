"""The shared repositories on one remote (issue 46, item 4): real processes, real git.

`citizen remote serve` runs as a child process serving bare repositories through
`git http-backend`; brokers push with their token (citizen.broker.remote), everyone else
fetches. Each test of a refusal performs the push that must not land and reads the
remote's refs after it.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPConnection
from pathlib import Path
from typing import cast

import git
import pytest

from citizen.admin import remote as remotemod
from citizen.admin.remote import Settings
from citizen.broker import remote, repos
from citizen.broker.server import Broker
from citizen.config import paths
from shared import baseline as base_records
from shared.errors import NotAllowed
from shared.evolution import Evolution
from tests.test_evolution import APP, commit, evo

__all__ = ["evo"]  # the fixture: a baseline with a tiny project, cloned by each citizen

READY_S = 60  # the remote prints its address once it listens
PLAIN_GIT = {"PATH": os.environ["PATH"], "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
             "GIT_TERMINAL_PROMPT": "0"}  # a git with no credential anywhere (a citizen's)


@dataclass
class Remote:
    root: Path
    url: str
    a: Settings  # server a's broker: a pusher
    b: Settings  # server b's broker: a pusher too

    def head(self, name: str = "baseline") -> str | None:
        done = subprocess.run(["git", "--git-dir", str(self.root / f"{name}.git"),
                               "rev-parse", "-q", "--verify", "refs/heads/main"],
                              capture_output=True, text=True, check=False)
        return done.stdout.strip() or None

    def token(self, who: Settings) -> str:
        return who.token_file.read_text().strip()


@pytest.fixture
def shared_remote(tmp_path: Path) -> Iterator[Remote]:
    """A running remote with pushers a and b."""
    keys = tmp_path / "remote-etc"
    keys.mkdir(mode=0o700)
    for name in ("a", "b"):
        remotemod.add_pusher(keys / "pushers", name, keys / f"{name}.token")
    root = tmp_path / "remote-repos"
    child = subprocess.Popen(
        [sys.executable, "-m", "citizen", "remote", "serve", "--listen", "127.0.0.1:0",
         "--root", str(root), "--pushers", str(keys / "pushers")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=paths.project_dir())
    try:
        yield started(child, root, keys)
    finally:  # also when it never started: no remote outlives its test
        child.terminate()
        child.wait(timeout=30)


def started(child: subprocess.Popen[bytes], root: Path, keys: Path) -> Remote:
    """The remote once it printed where it listens (its output shown if it never does)."""
    out = child.stdout
    assert out is not None
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:  # its log, a line at a time, for as long as it runs
        for line in out:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    seen: list[bytes] = []
    deadline = time.monotonic() + READY_S
    while not (seen and seen[-1].startswith(b"serving ")):
        try:
            seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            pytest.fail(f"the remote did not start: {b''.join(seen).decode()}")
    url = f"http://{seen[-1].split()[-1].decode()}/"
    return Remote(root, url, Settings(url, keys / "a.token"), Settings(url, keys / "b.token"))


def clone(url: str, into: Path) -> git.Repo:
    """A working clone, as a server's broker keeps its local repository."""
    subprocess.run(["git", "clone", "--quiet", url, str(into)], check=True, env=PLAIN_GIT,
                   capture_output=True)
    repo = git.Repo(into)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "broker").set_value("user", "email", "broker@x")
    return repo


def seed(shared_remote: Remote, tmp_path: Path) -> git.Repo:
    """Server a's local baseline, its first commit pushed to the empty remote."""
    repo = git.Repo.init(tmp_path / "a-baseline", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "broker").set_value("user", "email", "broker@x")
    commit(repo, {"app.py": APP}, "release")
    assert remote.push(Path(repo.working_dir), "baseline", shared_remote.a)
    return repo


def nothing(dropped: list[str]) -> None:
    assert not dropped, dropped


# ------------------------------------------------------------ a merge, shared

def test_a_merge_reaches_the_remote_and_every_server_fetches_it(
        evo: Path, shared_remote: Remote, rules_dir: Path, tmp_path: Path) -> None:
    """Broker a merges through its route and pushes; server b's broker and a citizen's
    clone (made as onboarding makes it) fetch the merge, neither holding a credential."""
    baseline = evo / "shared" / "baseline"
    assert remote.push(baseline, "baseline", shared_remote.a)  # the release, as a's setup
    (rules_dir / "civilization.json").write_text(json.dumps({
        "remote": shared_remote.url.rstrip("/"),  # the reader adds the slash
        "remote_token": str(shared_remote.a.token_file)}))
    source = remotemod.baseline_source(baseline)
    assert source == f"{shared_remote.url}baseline.git"
    b_repo = clone(source, tmp_path / "b-baseline")  # server b's broker's copy
    citizen = tmp_path / "citizen-code"
    subprocess.run(["git", "clone", "--quiet", source, str(citizen)], check=True,
                   env=PLAIN_GIT, capture_output=True)  # what onboarding runs as the citizen

    names = ["aria", "mira", "opus"]
    ev = Evolution(evo / "shared", names, False,
                   code_dirs={n: evo / n / "code" for n in names})
    commit(git.Repo(evo / "opus" / "code"), {"app.py": APP.replace("'hi'", "'hello'")}, "warm")
    cid = ev.announce("opus", evo / "opus" / "code", "warmer", "hello").id
    for peer in ("mira", "aria"):
        ev.record_run(cid, peer, "pytest -q", 0, "2026-01-01T00:00:00+00:00")
        ev.report(cid, peer, "worked", "ok")
    assert ev.adopt(cid, "aria", evo / "aria" / "code").status == "verified_good"  # 2 of 3

    status, answer = repos.merge(cast(Broker, type("B", (), {"server_mode": False})()),
                                 "aria", json.dumps({"change_id": cid}).encode())
    assert status == 200, answer
    merged = answer["baseline_commit"]
    assert shared_remote.head() == merged == git.Repo(baseline).head.commit.hexsha
    assert "'hello'" in (baseline / "app.py").read_text()

    b_path = Path(b_repo.working_dir)
    assert remote.sync(b_path, "baseline", shared_remote.b, nothing) == merged
    assert b_repo.head.commit.hexsha == merged and "'hello'" in (b_path / "app.py").read_text()
    subprocess.run(["git", "-C", str(citizen), "fetch", "--quiet", "origin"], check=True,
                   env=PLAIN_GIT, capture_output=True)
    assert git.Repo(citizen).commit("origin/main").hexsha == merged


def test_a_server_on_its_own_merges_as_before(tmp_path: Path, rules_dir: Path) -> None:
    """No "remote" in civilization.json (or no file): the step alone, no git run."""
    assert remotemod.settings() is None
    (rules_dir / "civilization.json").write_text(json.dumps({"server": "a"}))
    assert remotemod.settings() is None
    assert remote.advance(tmp_path / "nowhere", "baseline", lambda: "stepped", nothing) \
        == "stepped"


@pytest.mark.parametrize(("value", "problem"), [
    ("http://a:secret@10.0.0.1:8418/", "carries a user or password"),
    ("ftp://10.0.0.1/", r"no http\(s\) URL"), ("http://10.0.0.1/?x=1", r"no http\(s\) URL")])
def test_a_remote_url_with_a_credential_or_of_another_kind_is_refused(
        rules_dir: Path, value: str, problem: str) -> None:
    (rules_dir / "civilization.json").write_text(json.dumps({"remote": value}))
    with pytest.raises(remote.Unreachable, match=problem):
        remote.configured()


# ------------------------------------------------------------ what the remote refuses

def test_pushes_without_the_credential_with_a_wrong_one_or_not_forward_are_refused(
        shared_remote: Remote, tmp_path: Path) -> None:
    a = seed(shared_remote, tmp_path)
    first = shared_remote.head()
    work = clone(shared_remote.url + "baseline.git", tmp_path / "work")
    commit(work, {"evil.py": "import os\n"}, "not reviewed")
    # Without a credential: git's own push (the probe), then the POST by hand.
    pushed = subprocess.run(["git", "-C", str(work.working_dir), "push", "origin", "main"],
                            env=PLAIN_GIT, capture_output=True, text=True, check=False)
    assert pushed.returncode != 0 and shared_remote.head() == first
    host = shared_remote.url.split("/")[2]
    conn = HTTPConnection(host, timeout=30)
    conn.request("POST", "/baseline.git/git-receive-pack", body=b"0000",
                 headers={"Content-Type": "application/x-git-receive-pack-request"})
    answer = conn.getresponse()
    assert answer.status == 401 and "Basic" in (answer.getheader("WWW-Authenticate") or "")
    conn.close()
    # A wrong token for a known pusher, and a name the remote does not know.
    wrong = tmp_path / "wrong.token"
    for text in ("a:" + "x" * 43, "c:" + shared_remote.token(shared_remote.a).split(":")[1]):
        wrong.write_text(text)
        wrong.chmod(0o600)
        with pytest.raises(remote.Unreachable, match="did not take"):
            remote.push(Path(work.working_dir), "baseline", Settings(shared_remote.url, wrong))
        assert shared_remote.head() == first
    # The right credential, main rewritten: refused as not a fast-forward, even forced.
    a.git.commit("--amend", "-q", "-m", "rewritten")
    assert not remote.push(Path(a.working_dir), "baseline", shared_remote.a)
    header = base64.b64encode(shared_remote.token(shared_remote.a).encode()).decode()
    with_key = {**PLAIN_GIT, "GIT_CONFIG_PARAMETERS":
                f"'http.extraHeader=Authorization: Basic {header}'"}
    for refspec in ("+main:main", ":main"):  # forced past the client's check; a deletion
        forced = subprocess.run(["git", "-C", str(a.working_dir), "push", "--porcelain",
                                 shared_remote.url + "baseline.git", refspec],
                                env=with_key, capture_output=True, text=True, check=False)
        assert forced.returncode != 0 and "[remote rejected]" in forced.stdout, forced
        assert shared_remote.head() == first


def test_only_smart_http_of_a_served_repository_is_answered(shared_remote: Remote) -> None:
    host = shared_remote.url.split("/")[2]
    for path in ("/baseline.git/HEAD", "/baseline.git/config", "/../../etc/passwd",
                 "/nothing.git/info/refs?service=git-upload-pack",
                 "/baseline.git/info/refs"):  # the dumb protocol
        conn = HTTPConnection(host, timeout=30)
        conn.request("GET", path)
        answer = conn.getresponse()
        assert answer.status in (403, 404), (path, answer.status)
        assert b"[core]" not in answer.read()
        conn.close()


def test_a_pushers_file_others_may_read_stops_the_remote(tmp_path: Path) -> None:
    loose = tmp_path / "pushers"
    loose.write_text("a " + "0" * 64 + "\n")
    loose.chmod(0o644)
    with pytest.raises(remotemod.RemoteError, match="chmod 600"):
        remotemod.server(tmp_path / "repos", ("127.0.0.1", 0), loose)


# ------------------------------------------------------------ two brokers, one main

def test_a_push_another_server_made_first_is_fetched_and_the_step_applied_on_top(
        shared_remote: Remote, tmp_path: Path) -> None:
    """b pushes between a's fetch and a's push: a's push is refused, a rewinds (forgetting
    its step's commit), fetches b's main and applies its step again on top of it."""
    a = seed(shared_remote, tmp_path)
    b = clone(shared_remote.url + "baseline.git", tmp_path / "b-baseline")
    forgotten: list[list[str]] = []
    steps: list[str] = []

    def b_merges() -> str:
        return commit(b, {"b.py": "b = 1\n"}, "b's merge")

    def a_merges() -> str:
        if not steps:  # the race: b's broker pushes while a's step runs
            remote.advance(Path(b.working_dir), "baseline", b_merges, nothing, shared_remote.b)
        steps.append(commit(a, {"a.py": "a = 1\n"}, "a's merge"))
        return steps[-1]

    made = remote.advance(Path(a.working_dir), "baseline", a_merges, forgotten.append,
                          shared_remote.a)
    assert len(steps) == 2 and made == steps[1] == shared_remote.head()
    assert forgotten == [[steps[0]]]
    assert a.head.commit.parents[0].hexsha == b.head.commit.hexsha  # on top of b's
    assert (Path(a.working_dir) / "b.py").is_file()


def test_racing_is_bounded_and_leaves_nothing_of_the_step(
        shared_remote: Remote, tmp_path: Path) -> None:
    a = seed(shared_remote, tmp_path)
    b = clone(shared_remote.url + "baseline.git", tmp_path / "b-baseline")
    forgotten: list[list[str]] = []

    def a_merges() -> str:  # every time, b's broker pushes first
        remote.advance(Path(b.working_dir), "baseline",
                       lambda: commit(b, {"b.py": f"b = {len(forgotten)}\n"}, "b"), nothing,
                       shared_remote.b)
        return commit(a, {"a.py": "a = 1\n"}, "a's merge")

    with pytest.raises(remote.Raced, match="3 times in a row"):
        remote.advance(Path(a.working_dir), "baseline", a_merges, forgotten.append,
                       shared_remote.a)
    assert isinstance(remote.Raced("x"), NotAllowed)  # the broker answers 409
    assert len(forgotten) == remote.ATTEMPTS
    assert shared_remote.head() == b.head.commit.hexsha
    assert not (Path(a.working_dir) / "a.py").exists()  # a's main is back at a base


def test_a_refused_credential_undoes_the_step_and_its_record(
        evo: Path, shared_remote: Remote, tmp_path: Path) -> None:
    """The merge is on the shared baseline or nowhere: a push the remote refuses takes
    the merge back off this server's main and forgets the broker's record of it."""
    baseline = evo / "shared" / "baseline"
    assert remote.push(baseline, "baseline", shared_remote.a)
    before = shared_remote.head()
    wrong = tmp_path / "wrong.token"
    wrong.write_text("a:" + "y" * 43)
    wrong.chmod(0o600)

    def merges() -> str:
        made = commit(git.Repo(baseline), {"app.py": "x = 1\n"}, "merged")
        base_records.write_merged(evo / "shared", "opus-1", {"baseline_commit": made})
        return made

    def forget(dropped: list[str]) -> None:
        repos.forget(evo / "shared", dropped)

    with pytest.raises(remote.Unreachable, match="did not take"):
        remote.advance(baseline, "baseline", merges, forget, Settings(shared_remote.url, wrong))
    assert git.Repo(baseline).head.commit.hexsha == before == shared_remote.head()
    assert base_records.read_merged(evo / "shared", "opus-1", False) is None
    assert (baseline / "app.py").read_text() == APP


# ------------------------------------------------------------ where the credential goes

def test_the_credential_is_in_no_file_and_no_git_argv(
        shared_remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every git the broker runs, and every child git runs, traced (argv, and curl's
    headers: redacted); the token is in none of it and in no file of the repository."""
    a = seed(shared_remote, tmp_path)
    trace = tmp_path / "trace"
    shim = tmp_path / "bin"
    shim.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (shim / "git").write_text(  # its own argv, then every child's (GIT_TRACE) and curl's
        f"#!/bin/sh\nprintf 'argv: %s\\n' \"$*\" >> {trace}\n"
        f"GIT_TRACE={trace} GIT_TRACE_CURL={trace} exec {real} \"$@\"\n")
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")

    remote.sync(Path(a.working_dir), "baseline", shared_remote.a, nothing)
    fetched = trace.read_text(errors="replace")
    assert "git-remote-http" in fetched and "Authorization" not in fetched  # fetch: none
    made = remote.advance(Path(a.working_dir), "baseline",
                          lambda: commit(a, {"n.py": "n = 1\n"}, "next"), nothing,
                          shared_remote.a)
    assert shared_remote.head() == made
    traced = trace.read_bytes()
    assert b"Authorization: Basic <redacted>" in traced  # the header went, as the log shows
    secret = shared_remote.token(shared_remote.a)
    forms = [secret.encode(), secret.split(":")[1].encode(),
             base64.b64encode(secret.encode())]
    assert b"argv: " in traced and b"push --porcelain" in traced and b"run_command:" in traced
    assert not [f for f in forms if f in traced]
    leaked = [p for p in Path(a.working_dir).rglob("*") if p.is_file() and p != trace
              and any(f in p.read_bytes() for f in forms)]
    assert not leaked
    stored = [p for p in shared_remote.root.rglob("*") if p.is_file()
              and any(f in p.read_bytes() for f in forms)]
    assert not stored
