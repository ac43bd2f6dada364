"""A hostile reviewer's attacks on the refactor: a citizen writing files straight into the
commons (never through the tools), or a model choosing arguments. Each test is one attack."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from citizen.tools.dynamic import dynamic_tools
from shared.atomic import write_json
from tests.scripts import tool_env

CODE = "def run(**args) -> str:\n    return 'forged'\n"


def _plant_tool(civ: Path, name: str, manifest: dict[str, object],
                reviews: dict[str, dict[str, object]] | None = None) -> None:
    """Files a hostile citizen writes itself: a tool's code, tests, manifest, reviews."""
    tools = civ / "shared" / "tools"
    impl, tests = tools / "impl" / f"{name}.py", tools / "tests" / f"test_{name}.py"
    impl.write_text(CODE)
    tests.write_text("def test_ok() -> None:\n    pass\n")
    shas = {"impl_sha": hashlib.sha256(impl.read_bytes()).hexdigest(),
            "tests_sha": hashlib.sha256(tests.read_bytes()).hexdigest()}
    write_json(tools / "registry" / f"{name}.json", {"author": "opus", **shas, **manifest})
    for peer, review in (reviews or {}).items():
        write_json(tools / "registry" / f"{name}.reviews" / f"{peer}.json",
                   {"author": peer, "decision": "approve", "tests_passed": True, **shas,
                    **review})


def test_a_malformed_manifest_never_stops_every_wake(civ: Path) -> None:
    """A manifest without a description, or an approval of a tool without its fields, is
    the author's own record: it must be skipped, not end every citizen's wake (whose
    tools dynamic_tools builds) - repeated crashed wakes roll the code back."""
    _plant_tool(civ, "no_description", {"name": "no_description", "input_schema": {}})
    _plant_tool(civ, "bare_review", {"name": "bare_review", "description": "d",
                                     "input_schema": {}},
                reviews={"mira": {"decision": None}, "aria": {}})
    write_json(civ / "shared" / "tools" / "registry" / "bare_review.reviews" / "mira.json",
               {"author": "mira"})  # an approval naming nothing but its author
    _plant_tool(civ, "keyword_arg", {"name": "keyword_arg", "description": "d",
                                     "input_schema": {"properties": {"class": {}}}},
                reviews={"mira": {}, "aria": {}})
    _plant_tool(civ, "bad_schema", {"name": "bad_schema", "description": "d",
                                    "input_schema": ["not", "an", "object"]},
                reviews={"mira": {}, "aria": {}})
    tools = dynamic_tools(tool_env("mira").config)
    assert "no_description" not in tools and "bare_review" not in tools
    assert "bad_schema" not in tools
    # A property that is a Python keyword is no parameter: the tool takes its arguments whole.
    assert tools["keyword_arg"].run(tool_env("mira"), {"class": "x"}) == "forged"


def test_a_dynamic_tool_never_takes_a_built_in_name(civ: Path) -> None:
    """propose() refuses a built-in's name, but a citizen writes its manifest itself: one
    named like a built-in that this wake lacks (mail tools without mail, code tools
    without ~/code) would run as it - without the built-in's permission - and a manifest
    filed under one name may not claim another's."""
    _plant_tool(civ, "send_email", {"name": "send_email", "description": "Send an email.",
                                    "input_schema": {}}, reviews={"mira": {}, "aria": {}})
    _plant_tool(civ, "innocent", {"name": "email_send", "description": "d",
                                  "input_schema": {}}, reviews={"mira": {}, "aria": {}})
    tools = dynamic_tools(tool_env("mira").config)
    assert "send_email" not in tools
    assert "email_send" not in tools and "innocent" not in tools


def test_a_malformed_peer_report_never_stops_the_peer_or_its_monitors(civ: Path) -> None:
    """A report is its author's own file: one whose `ts` is no time or whose findings are
    no findings must not raise in every monitor's `recent` (each PEER_MONITOR wake about
    the peer) or in the peer's REFLECT wake - crashed wakes roll its code back."""
    from citizen.wake.flow import run_wake
    from shared.monitor import Finding, Monitor
    from tests.scripts import Actor, say

    findings = civ / "shared" / "monitor" / "findings"
    monitor = Monitor(findings, enforce_identity=False)
    monitor.file("aria", "opus", [Finding("stuck", "real")])
    for i, (ts, found) in enumerate([("no time", [{"kind": "k", "detail": "d"}]),
                                     ({"a": 1}, [{"kind": "k", "detail": "d"}]),
                                     ("2026-01-01T00:00:00+00:00", "xyz"),
                                     ("2026-01-01T00:00:00+00:00", [1, 2]),
                                     ("2026-01-01T00:00:00+00:00", [{"kind": 3}])]):
        write_json(findings / "aria" / f"2000010{i}T000000-opus-bad.json",
                   {"author": "opus", "peer": "aria", "ts": ts, "findings": found})
    assert monitor.recent("aria") == 1
    assert [r["findings"] for r in monitor.about("aria")] == [[{"kind": "stuck",
                                                                "detail": "real"}]]
    assert run_wake("aria", wake_type="REFLECT",
                    provider=lambda c, s: Actor(say("noted"))).status == "ok"


def test_a_flood_of_peer_reports_never_keeps_the_peer_from_reflecting(civ: Path) -> None:
    """Any citizen may file as many reports as it likes about a peer, each as long as it
    likes: the peer's REFLECT prompt must stay within its budget (else the wake ends
    'budget' before any reflection, the reports stay unseen, and so on forever)."""
    from citizen.wake.flow import run_wake
    from shared.monitor import Finding, Monitor
    from tests.scripts import Actor, say

    monitor = Monitor(civ / "shared" / "monitor" / "findings", enforce_identity=False)
    for _ in range(30):
        monitor.file("aria", "opus", [Finding("stuck", "x " * 20000)] * 20)
    assert run_wake("aria", wake_type="REFLECT",
                    provider=lambda c, s: Actor(say("noted"))).status == "ok"


def test_a_citizen_never_plants_the_quiesce_directory(civ: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """shared/monitor is the citizens' (3775): before root makes monitor/quiesce (at the
    first onboarding), a citizen may make it - its own directory, or a link to one. Then
    root's onboarding would make the next citizen's lock in it, and the planter, owning
    the directory, swaps in a lock of its own, holds it, and freezes that daemon
    WORK_WAIT_S before every wake. Root must refuse the directory; a daemon must not wait
    on a lock in a directory that is not root's."""
    import fcntl
    import os
    import time

    from citizen.home import quiesce

    monkeypatch.setattr(quiesce, "server_mode", lambda _: True)
    elsewhere = civ / "opus" / "planted"
    elsewhere.mkdir()
    quiesce.lock_dir().symlink_to(elsewhere)  # the planter's link
    with pytest.raises(OSError, match="not root's"):
        quiesce.prepare("aria", os.getuid(), os.getgid())
    assert not (elsewhere / "aria.lock").exists()
    quiesce.lock_dir().unlink()
    quiesce.lock_dir().mkdir()  # the planter's own directory, and a lock it holds
    if os.geteuid() == 0:  # run as root: the directory is some other user's, as planted
        os.chown(quiesce.lock_dir(), 65534, -1)
    planted = os.open(quiesce.lock_path("aria"), os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(planted, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        with quiesce.working("aria", wait_s=3.0):
            assert time.monotonic() - started < 1.0
        with quiesce.still(["aria"], wait_s=0.1) as busy:
            assert busy == ["aria"]  # a backup never calls a lock in such a place quiescent
    finally:
        os.close(planted)
    # The directory made root's later (setup_server.sh's `install -d` takes it over), its
    # planted lock left in it: still the planter's, never waited on.
    if os.geteuid() == 0:
        os.chown(quiesce.lock_dir(), 0, -1)
    os.chmod(quiesce.lock_dir(), 0o755)  # noqa: S103 - root's lock directory is 0755
    planted = os.open(quiesce.lock_path("aria"), os.O_RDWR)
    fcntl.flock(planted, fcntl.LOCK_EX)
    if os.geteuid() == 0:
        os.fchown(planted, 65534, -1)
    try:
        started = time.monotonic()
        with quiesce.working("aria", wait_s=3.0):
            assert time.monotonic() - started < 1.0
    finally:
        os.close(planted)
    with pytest.raises(OSError, match=r"not (root|aria)'s"):  # never the planted lock
        quiesce.prepare("aria", 1234, os.getgid())


def test_a_model_cannot_crash_its_wake_with_arguments_of_the_wrong_type(civ: Path) -> None:
    """Binding checks names only: a list where a path goes, a text where a number goes or a
    word outside a Literal raised inside the tool and ended the wake as our bug - a
    hostile model (or a page that steers it) ends three wakes so, and the daemon rolls the
    citizen's code back. Each must be a ToolFailure the model reads."""
    from citizen.tools import ToolFailure, core_tools

    tools = core_tools()
    for name, args in (("read_file", {"path": ["x"]}), ("read_file", {"path": {"a": 1}}),
                       ("read_file", {"path": "x", "limit": "9"}),
                       ("read_file", {"path": "x", "limit": True}),
                       ("read_file", {"path": "x", "limit": None}),
                       ("context_add", {"context": "nonexistent", "text": "x"})):
        with pytest.raises(ToolFailure, match=f"^bad arguments for {name}"):
            tools[name].run(tool_env("opus"), args)
    (civ / "opus" / "note.txt").write_text("hello")
    assert tools["read_file"].run(tool_env("opus"), {"path": "note.txt", "limit": 3}) == "hel"
