"""Confinement of a hostile citizen, at the level of one process (issue 15).

Each test is an attack that worked before: the citizen rewrites its own rules, reads its
secrets through the kernel's process files or a link, writes the daemon's own records,
or pre-creates a record in another's name so that the rightful author can never write.
The end-to-end version, with real Unix users and the real unit, is in
tests/server_install/.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.home.contexts import ContextStore
from citizen.home.memory import Memory
from citizen.home.tasks import TaskQueue
from citizen.llm.base import estimate_tokens
from citizen.tools import ToolFailure, core_tools, sandbox
from citizen.tools.base import ToolEnv
from citizen.tools.dynamic import dynamic_tools
from shared import records
from shared.records import RECORD_MODE
from shared.streams import Streams
from shared.threads import Threads
from tests.thoughtworld import commons as consensus_commons
from tests.thoughtworld import proposal, vote

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own files as others")


def _server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config.loading, "_commons_owned", lambda _shared: True)


def _env() -> ToolEnv:
    home = paths.home("opus")
    cfg = config.load_citizen("opus")
    contexts = ContextStore(home.contexts, cfg.context_limits, estimate_tokens).load_all()
    return ToolEnv(home, cfg, config.load_secrets("opus"), TaskQueue(home.tasks),
                   Memory(home.memory), contexts)


# ------------------------------------------------------------------ rules and secrets


def test_on_a_server_the_citizen_cannot_rewrite_its_rules(
        civ: Path, rules_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: write config.json with a listener as the API endpoint, an outside
    address, a bigger budget and one approval. On a server only the operator's file
    governs those; the citizen's own file may still set its focus."""
    own = paths.citizen_config_file("opus")
    data = json.loads(own.read_text())
    data.update({"focus": "Poetry", "email": "thief@evil.example",
                 "llm": {"provider": "anthropic", "local_url": "",
                         "anthropic_base_url": "http://evil.example:9/"},
                 "budget": {"max_usd_per_wake": 100, "max_iterations": 200,
                            "max_output_tokens": 4096},
                 "library_approvals": 1,
                 "permissions": {"can_send_email": True, "can_use_network": True},
                 "mail": {"allowed_senders": ["thief@evil.example"]}})
    own.write_text(json.dumps(data))
    dev = config.load_citizen("opus")
    assert dev.budget.max_usd_per_wake == 100  # dev mode: one user, the home governs
    _server(monkeypatch)
    (rules_dir / "opus.json").write_text(json.dumps({"budget": {
        "max_usd_per_wake": 0.5, "max_iterations": 25, "max_output_tokens": 4096}}))
    cfg = config.load_citizen("opus")
    assert cfg.focus == "Poetry"  # what the citizen may set for itself
    assert cfg.email == "opus@experience.local"
    assert cfg.llm.anthropic_base_url == ""
    assert (cfg.budget.max_usd_per_wake, cfg.budget.max_iterations) == (0.5, 25)
    assert cfg.library_approvals == 2
    assert not cfg.permissions.get("can_use_network")
    assert cfg.mail.allowed_senders == ()
    assert cfg.source == rules_dir / "opus.json"


def test_on_a_server_secrets_come_from_the_credential_never_the_home(
        civ: Path, rules_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attack: put ANTHROPIC_BASE_URL (a listener) in the home's `.env`, which the
    citizen can write. On a server that file is not read at all."""
    with paths.citizen_env_file("opus").open("a") as fh:
        fh.write("ANTHROPIC_API_KEY=from-the-home\nANTHROPIC_BASE_URL=http://evil.example/\n")
    for key in (*config.SECRET_KEYS, "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    assert config.load_secrets("opus").get("ANTHROPIC_BASE_URL") == "http://evil.example/"
    _server(monkeypatch)
    assert config.load_secrets("opus").get("ANTHROPIC_BASE_URL") == ""
    (rules_dir / "opus.env").write_text("ANTHROPIC_API_KEY=from-etc-0001\n")
    assert config.load_secrets("opus").get("ANTHROPIC_API_KEY") == "from-etc-0001"
    # The unit passes no credential any more (the broker holds them): one planted in a
    # credential directory is not read either.
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "secrets").write_text("ANTHROPIC_API_KEY=from-the-unit-01\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    assert config.load_secrets("opus").get("ANTHROPIC_API_KEY") == "from-etc-0001"


# ------------------------------------------------------------------ file tools


def test_file_tools_refuse_the_kernels_process_files_and_credentials(
        civ: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """File tools run in the daemon, outside the sandbox: /proc/self/environ is the
    daemon's environment, and the unit's credential directory holds its secrets."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "secrets").write_text("ANTHROPIC_API_KEY=in-the-credential\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    env, read = _env(), core_tools()["read_file"]
    for path in ("/proc/self/environ", f"/proc/{os.getpid()}/environ", "/proc/self/mem",
                 str(creds / "secrets"), "/sys/kernel/notes", "../mira/.env"):
        with pytest.raises(ToolFailure, match="never readable"):
            read.run(env, {"path": path})
    # a symlink in the home pointing at them is resolved first
    (env.home.dir / "innocent").symlink_to("/proc/self/environ")
    with pytest.raises(ToolFailure, match="never readable"):
        read.run(env, {"path": "innocent"})


def test_a_hard_link_to_the_secrets_is_refused_by_inode(civ: Path) -> None:
    env, read = _env(), core_tools()["read_file"]
    os.link(env.home.env, env.home.dir / "notes.txt")
    with pytest.raises(ToolFailure, match="link to your secrets"):
        read.run(env, {"path": "notes.txt"})


def test_file_tools_never_write_the_daemons_own_files(civ: Path) -> None:
    """The attack: write_file config.json (its rules), state.json, a task into done/,
    a forged wake log."""
    env, write = _env(), core_tools()["write_file"]
    before = env.home.config.read_bytes()
    for path in ("config.json", "state.json", ".daemon.lock", "tasks/done/t-1.json",
                 "logs/wakes/forged.jsonl", "mail/ledger.json", ".env"):
        with pytest.raises(ToolFailure):
            write.run(env, {"path": path, "content": "{}"})
    assert env.home.config.read_bytes() == before
    assert "wrote" in write.run(env, {"path": "work/notes.md", "content": "fine"})


# ------------------------------------------------------------------ records in the commons


def test_a_record_is_never_group_writable(civ: Path) -> None:
    """The attack: a peer opens another's record for writing (it is in the same group)
    and rewrites it in place - the file keeps its author's owner."""
    assert RECORD_MODE & 0o022 == 0
    threads = Threads(civ / "shared" / "t", "t", "header.json", top=civ / "shared",
                      enforce=False)
    tid = threads.open({"by": "opus"})
    threads.write(tid, "step.json", "opus", {"x": 1})
    assert (threads.dir(tid) / "step.json").stat().st_mode & 0o022 == 0


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@as_root
def test_a_pre_created_step_does_not_block_its_author(civ: Path) -> None:
    """The attack: create `verify-01.json` first, naming the rightful author, so the
    author's own write fails for good. The author's record goes beside it, under a name
    nobody can guess, and readers take the file the author owns."""
    threads = Threads(civ / "shared" / "t", "t", "header.json", top=civ / "shared",
                      enforce=True)
    tid = threads.open({"by": "root"})
    forged = threads.dir(tid) / "verify-01.json"
    forged.write_text(json.dumps({"author": "root", "decision": "reject"}))
    os.chown(forged, _nobody(), -1)
    assert threads.read(tid, "verify-01.json", "root") is None  # the forgery never counts
    threads.write(tid, "verify-01.json", "root", {"decision": "approve"})
    rec = threads.read(tid, "verify-01.json", "root")
    assert rec is not None and rec["decision"] == "approve"
    assert threads.names(tid, "verify-*.json") == ["verify-01.json"]
    with pytest.raises(Exception, match="already recorded"):
        threads.write(tid, "verify-01.json", "root", {"decision": "reject"})


@as_root
def test_a_pre_created_review_does_not_block_its_author() -> None:
    """The same attack on the records named after their author (`reviews/<me>.json`):
    root plays the forger, `nobody` the author, in a sticky directory both may add to."""
    top = Path(tempfile.mkdtemp(prefix="confine-"))
    try:
        os.chmod(top, 0o1777)  # noqa: S103 - sticky and open to both, like the commons
        taken = top / "nobody.json"
        taken.write_text(json.dumps({"citizen": "nobody", "verdict": "forged by root"}))
        os.seteuid(_nobody())
        try:
            records.write(top, taken, "nobody", {"verdict": "mine"})
            records.write(top, taken, "nobody", {"verdict": "mine, again"})
        finally:
            os.seteuid(0)
        got = records.read(taken, "nobody", enforce=True)
        assert got is not None and got["verdict"] == "mine, again"
        assert len(list(top.glob("nobody.json~*"))) == 1  # its own, rewritten in place
        assert json.loads(taken.read_text())["verdict"] == "forged by root"  # kept
    finally:
        shutil.rmtree(top)


# ------------------------------------------------------------------ permissions


@pytest.mark.parametrize(("tool", "permission", "args"), [
    ("send_email", "can_send_email", {"to": "a@example.org", "subject": "s", "body": "b"}),
    ("code_announce", "can_modify_shared_code", {"description": "d", "expected_outcome": "e"}),
    ("code_adopt", "can_modify_shared_code", {"change_id": "chg-x"}),
    ("tool_propose", "can_create_tools", {"name": "t", "description": "d",
                                          "input_schema": "{}", "code": "", "tests": ""}),
    ("debate_start", "can_start_debates", {"topic": "t", "participants": "mira"}),
])
def test_every_permission_is_enforced_where_the_action_happens(
        civ: Path, rules_dir: Path, tool: str, permission: str, args: dict[str, str]
) -> None:
    """The operator withholds one permission: the tool is refused with the reason before
    anything happens - and granted, the same call gets past the check."""
    (rules_dir / "opus.json").write_text(json.dumps({"permissions": {permission: False}}))
    env = _env()
    tools = {**dynamic_tools(env.config), **core_tools(mail=True, code=True)}
    assert not tools[tool].allowed(env.config)
    with pytest.raises(ToolFailure, match=f"needs the permission {permission}"):
        tools[tool].run(env, args)
    (rules_dir / "opus.json").write_text(json.dumps({"permissions": {permission: True}}))
    granted = _env()
    assert tools[tool].allowed(granted.config)
    try:
        tools[tool].run(granted, args)
    except Exception as exc:  # it may fail further on (no mailbox here), not on this
        assert "needs the permission" not in str(exc)


def test_the_network_permission_decides_the_sandbox_network(
        civ: Path, rules_dir: Path) -> None:
    if not sandbox.confined():
        pytest.skip(sandbox.problem() or "sandbox off")
    host = Path("/proc/net/dev").read_text().count(":")
    if host < 2:
        pytest.skip("this machine has only a loopback interface")
    shell = core_tools()["shell_command"]
    probe = {"command": "grep -c : /proc/net/dev"}
    assert shell.run(_env(), probe).split()[-1] == "1"  # its own namespace: loopback only
    (rules_dir / "opus.json").write_text(json.dumps({"permissions": {"can_use_network": True}}))
    assert shell.run(_env(), probe).split()[-1] == str(host)  # the host's network


@as_root
def test_a_bidder_cannot_grant_itself_by_writing_the_decision_first() -> None:
    """The attack: a bidder writes `decision.json` granting itself before any daemon
    decides. Every reader checks the decision against the rules on the bids it names;
    the forgery does not count, and the rightful decision is written beside it."""
    top = Path(tempfile.mkdtemp(prefix="confine-streams-"))
    try:
        os.chmod(top, 0o1777)  # noqa: S103 - sticky and open to both, like the commons
        (top / "streams").mkdir(mode=0o3777)
        os.chmod(top / "streams", 0o3777)  # noqa: S103 - the commons' dir, open to both
        people = ["nobody", "root"]
        streams = Streams(top, people, enforce_identity=True)
        s = streams.open("<m@x>", "Who knows flock?", participants=people, sender="op@x",
                         fixed_slots=1)
        os.chmod(streams.threads.dir(s.id), 0o3777)  # noqa: S103 - both add records
        os.seteuid(_nobody())
        try:
            forger = Streams(top, people, enforce_identity=True)
            forger.think(s.id, "nobody", True, 0.1, "me!")
            forger.threads.write(s.id, "decision.json", "nobody", {
                "granted": ["nobody"], "denied": ["root"], "silent": [], "slots": 1,
                "exit": "everyone_decided", "decided_at_ms": 10, "fallback": False,
                "decided_by": "nobody", "considered": ["nobody", "root"]})
        finally:
            os.seteuid(0)
        streams.think(s.id, "root", True, 0.9, "I do")
        assert streams.decision(s.id) is None  # the rules do not give that decision
        decided = streams.try_decide(s.id, "root", now=10**10)
        assert decided is not None and list(decided["granted"]) == ["root"]
        again = streams.decision(s.id)  # every reader, from now on
        assert again is not None and list(again["granted"]) == ["root"]
    finally:
        shutil.rmtree(top)


def _open_threads(top: Path) -> Threads:
    os.chmod(top, 0o1777)  # noqa: S103 - sticky and open to both, like the commons
    return Threads(top / "t", "t", "header.json", top=top, enforce=True)


@as_root
def test_a_link_to_anothers_record_is_not_their_record() -> None:
    """The attack (helper's F1): symlink the victim's vote in one thread into another,
    where it would count as the victim's vote and block the victim's own."""
    top = Path(tempfile.mkdtemp(prefix="confine-links-"))
    try:
        threads = _open_threads(top)
        a, b = threads.open({"by": "root"}), threads.open({"by": "root"})
        for tid in (a, b):
            os.chmod(threads.dir(tid), 0o3777)  # noqa: S103 - both add records
        threads.write(a, "vote-01.json", "root", {"decision": "approve"})
        os.seteuid(_nobody())
        try:
            (threads.dir(b) / "vote-01.json").symlink_to(threads.dir(a) / "vote-01.json")
        finally:
            os.seteuid(0)
        assert threads.read(b, "vote-01.json", "root") is None
        threads.write(b, "vote-01.json", "root", {"decision": "reject"})  # not blocked
        rec = threads.read(b, "vote-01.json", "root")
        assert rec is not None and rec["decision"] == "reject"
    finally:
        shutil.rmtree(top)


@as_root
def test_a_record_renamed_by_the_threads_owner_does_not_count_elsewhere() -> None:
    """The attack (helper's F2): the owner of a thread's directory renames the victim's
    round-1 reject to round 2. A record knows where it was written."""
    top = Path(tempfile.mkdtemp(prefix="confine-rename-"))
    try:
        threads = _open_threads(top)
        tid = threads.open({"by": "nobody"})
        os.chmod(threads.dir(tid), 0o3777)  # noqa: S103 - both add records
        os.chown(threads.dir(tid), _nobody(), -1)  # the opener owns its thread
        threads.write(tid, "vote-01.json", "root", {"decision": "reject"})
        os.seteuid(_nobody())
        try:
            os.rename(threads.dir(tid) / "vote-01.json", threads.dir(tid) / "vote-02.json")
        finally:
            os.seteuid(0)
        assert threads.read(tid, "vote-02.json", "root") is None
    finally:
        shutil.rmtree(top)


@as_root
def test_an_unreadable_record_is_ignored_not_a_crash() -> None:
    top = Path(tempfile.mkdtemp(prefix="confine-chmod-"))
    try:
        threads = _open_threads(top)
        tid = threads.open({"by": "root"})
        threads.write(tid, "vote-01.json", "root", {"decision": "approve"})
        os.chmod(threads.dir(tid) / "vote-01.json", 0)
        os.seteuid(_nobody())
        try:
            assert threads.read(tid, "vote-01.json", "root") is None
        finally:
            os.seteuid(0)
    finally:
        shutil.rmtree(top)


def test_a_proposal_rewritten_after_its_votes_loses_them(tmp_path: Path) -> None:
    """The attack (from the helper's reading): a proposal is its executor's own file; once
    verifier and integrator approved it, the executor rewrites its actions in place and
    runs what nobody approved. A vote names the revision it judged."""
    c = consensus_commons(tmp_path / "shared")
    pid = c.request("Create hello.md", "opus", "operator").id
    c.propose(pid, "opus", proposal())
    roles = c.load(pid).roles
    c.verify(pid, roles["verifier"], vote())
    c.integrate(pid, roles["integrator"], vote())
    assert c.load(pid).phase == "execute"
    path = c.records_dir / pid / "proposal-01.json"
    rev = json.loads(path.read_text())
    rev["actions"] = [{"tool": "write_file", "args": {"path": "hello.md", "content": "evil"}}]
    path.write_text(json.dumps(rev))  # in place: same file, same owner
    after = c.load(pid)
    assert after.phase == "verify" and not after.verifications
