"""A citizen against its peers' code evolution on a booted server, with real Unix users
(issue 28, breaks 1, 2 and 6).

Each test is an attack opus's own Unix user can make - in its `~/code`, its `.git`, its
home, or in a change it announces - and checks that nothing of it runs as, or writes
into, mira (the reviewer, the adopter) or opus's own daemon. Every trap touches a marker
`/tmp/marks/<break>-<trap>-as-<user>`; `citizen tool` runs outside any unit (runuser), so
its git sees the box's /tmp. On the code before (ddf7853) each test failed - the
docstrings say how. The git tests end by springing their traps the one way left (opus's
plain git in its own repository), so a passing test is not a trap that was never armed;
the review test checks that the planted test ran (it passed, having written its scratch).

The tools run with EXPERIENCE_SANDBOX=required, as the unit runs them (outside a unit the
default, `auto`, would run a command unconfined where bubblewrap cannot start), and with
the box's plain PATH, as a unit has it: `code_test` runs the daemon's interpreter by path
(it ran `python`, which a Debian server does not have - every review failed with 127).
Boots its own container (tests/nspawn.py); root and systemd-nspawn needed, skipped with
the reason elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.nspawn import PATH, Container, ran_tests, set_up_server, unavailable

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

MARKS = "/tmp/marks"  # inside the box, 1777: every user's traps touch here
BASELINE = "/home/shared/baseline"
TOOL_ENV = ("EXPERIENCE_SANDBOX=required", f"PATH={PATH}")
# A change's test run is the project's whole suite (TEST_COMMAND in citizen/tools/code.py);
# the change brings a root conftest.py that lets pytest collect only its own test_zz_*
# files, so a review takes seconds. The attack itself is an ordinary collected test.
FAST = """
def pytest_ignore_collect(collection_path, config):
    name = collection_path.name
    if name.startswith("test_") and name.endswith(".py") and not name.startswith("test_zz_"):
        return True
    return None
"""
# What a change's test writes where its runner's daemon, git, Python or bash read later,
# outside any sandbox: the runner's ~/code (imported at its daemon's next start), hooks,
# ~/.gitconfig (names programs git runs), ~/.config/git, ~/.bashrc, a new top-level file.
EVIL_TEST = """
import os, pathlib, subprocess

TARGETS = ("code/citizen/evil.py", "code/sitecustomize.py", "code/.git/hooks/post-commit",
           "code/.git/config", ".gitconfig", ".config/git/config", ".bashrc", "planted.txt")


def test_zz_plants_into_its_runner():
    landed = []
    for home in {os.environ["HOME"], str(pathlib.Path.home()), "/home/mira"}:
        for rel in TARGETS:
            path = pathlib.Path(home, rel)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a") as f:
                    f.write("\\n[core]\\n\\tfsmonitor = touch /tmp/marks/b1-planted; false\\n")
                landed.append(str(path))
            except OSError:
                pass
    done = subprocess.run(["git", "config", "--global", "core.fsmonitor",
                           "touch /tmp/marks/b1-global; false"], capture_output=True)
    if done.returncode == 0:
        landed.append("git config --global")
    pathlib.Path("scratch.txt").write_text("ok")  # its own scratch tree stays writable
    assert pathlib.Path("scratch.txt").read_text() == "ok"
    assert landed == [], landed
"""


@pytest.fixture(scope="module")
def box() -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-peers") as (box, _):
        box.run("install", "-d", "-m", "1777", MARKS)
        yield box


def as_user(box: Container, user: str, script: str) -> str:
    """A shell script as `user`, outside any sandbox - what its daemon, rewritten, could
    run."""
    return box.run("runuser", "-u", user, "--", "sh", "-c", script).stdout


def tool(box: Container, user: str, tool_name: str, args: dict[str, str]) -> str:
    """`citizen tool`: the daemon's own code path for a tool call, as `user`."""
    return box.run("runuser", "-u", user, "--", "env", *TOOL_ENV, "citizen", "tool", user,
                   tool_name, json.dumps(args)).stdout


def marks(box: Container, prefix: str) -> list[str]:
    return [m for m in box.run("ls", MARKS).stdout.split() if m.startswith(prefix)]


def commit(box: Container, user: str, files: dict[str, str], message: str,
           base: str = "") -> str:
    """Commit `files` in `user`'s ~/code (on `base` when given); the new head."""
    script = f"set -e; cd /home/{user}/code; "
    if base:
        script += f"git reset -q --hard {base}; "
    for name, text in files.items():
        script += f"mkdir -p \"$(dirname {name})\"; cat > {name} <<'EOF'\n{text}\nEOF\n"
    script += f"git add -A; git commit -qm {json.dumps(message)}; git rev-parse HEAD"
    return as_user(box, user, script).strip()


def announce(box: Container, user: str, what: str) -> str:
    return str(json.loads(tool(box, user, "code_announce", {
        "description": what, "expected_outcome": "the tests still pass"}))["id"])


def trap(tag: str, name: str, then: str = "false") -> str:
    return f"touch {MARKS}/{tag}-{name}-as-$(id -un); {then}"


def plant_repo(box: Container, user: str, tag: str) -> None:
    """As `user`: what makes git run a command, in its own ~/code/.git (its config, its
    hooks, attributes naming a filter and a diff driver)."""
    git = f"/home/{user}/code/.git"
    settings = {"core.fsmonitor": trap(tag, "fsmonitor"),
                "core.alternateRefsCommand": trap(tag, "altrefs", "true"),
                "filter.trap.clean": trap(tag, "clean", "cat"),
                "filter.trap.smudge": trap(tag, "smudge", "cat"),
                "diff.trap.textconv": trap(tag, "textconv", "cat"),
                "core.pager": trap(tag, "pager", "cat")}
    script = "set -e; " + "".join(f"git config --file {git}/config {k} '{v}'; "
                                  for k, v in settings.items())
    for hook in ("reference-transaction", "post-checkout", "post-commit", "post-merge",
                 "post-index-change", "pre-auto-gc", "prepare-commit-msg", "commit-msg"):
        script += (f"printf '#!/bin/sh\\n{trap(tag, 'hook-' + hook, 'true')}\\n' > "
                   f"{git}/hooks/{hook}; chmod 755 {git}/hooks/{hook}; ")
    script += f"echo '* filter=trap diff=trap' > {git}/info/attributes; "
    # An alternate makes a git in this repository ask its alternateRefsCommand for refs.
    script += f"echo {BASELINE}/.git/objects > {git}/objects/info/alternates"
    as_user(box, user, script)


def unplant_repo(box: Container, user: str) -> None:
    git = f"/home/{user}/code/.git"
    as_user(box, user, f"cd /; for k in core.fsmonitor core.alternateRefsCommand "
            f"filter.trap.clean filter.trap.smudge diff.trap.textconv core.pager; do "
            f"git config --file {git}/config --unset $k || true; done; "
            f"rm -f {git}/info/attributes {git}/objects/info/alternates; "
            f"find {git}/hooks -type f ! -name '*.sample' -delete")


def test_a_changes_tests_write_nothing_into_its_reviewers_home(box: Container) -> None:
    """Break 1: a peer's code ran in a sandbox that bound its runner's whole home
    read-write (ddf7853: `sandbox.wrap` always `--bind home home`, for code_test too), so
    a change under review wrote into its reviewer's ~/code - imported unsandboxed at its
    daemon's next start - and ~/.gitconfig. Now the change's tests run with mira's home
    read-only (Trust.PEER): they run, and pass, and nothing landed."""
    base = box.run("git", "-C", BASELINE, "rev-parse", "HEAD").stdout.strip()
    commit(box, "opus", {"conftest.py": FAST, "tests/test_zz_evil.py": EVIL_TEST},
           "a faster test run", base=base)
    cid = announce(box, "opus", "a faster test run")
    gitconfig = box.run("cat", "/home/mira/.gitconfig", check=False).stdout
    box.run("touch", "/root/before-review")
    out = tool(box, "mira", "code_test", {"change_id": cid})
    assert out.startswith("tests passed") and "1 passed" in out, out  # it ran: the attack
    changed = box.run("find", "/home/mira", "-path", "/home/mira/code/.git/objects", "-prune",
                      "-o", "-newer", "/root/before-review", "-print").stdout.split()
    assert changed == [], changed  # no file or directory of mira's home written
    status = box.run("runuser", "-u", "mira", "--", "git", "-C", "/home/mira/code", "status",
                     "--porcelain", "--ignored").stdout
    assert status == "", status
    for planted in ("/home/mira/code/citizen/evil.py", "/home/mira/code/sitecustomize.py",
                    "/home/mira/code/.git/hooks/post-commit", "/home/mira/planted.txt"):
        assert box.run("test", "-e", planted, check=False).returncode != 0, planted
    assert box.run("cat", "/home/mira/.gitconfig", check=False).stdout == gitconfig
    assert "b1-" not in box.run("cat", "/home/mira/code/.git/config").stdout


def test_a_peers_repository_runs_nothing_as_its_reader(box: Container) -> None:
    """Break 2: git ran inside a peer's repository as the caller. ddf7853's
    `divergence(paths.home("opus").code, ...)` (code_list_changes) ran `git fetch` and
    `git diff` with opus's repository as mira, and onboarding declared every ~/code a
    system-wide safe.directory, so git took opus's .git/config for mira's: measured on
    git 2.39.5 with two users and those permissions, that fetch ran opus's
    core.fsmonitor as mira (and then failed on FETCH_HEAD, which mira cannot write). Now
    mira reads opus's repository as data only (gitsafe: git runs in mira's own
    repository, borrowing opus's objects; opus's HEAD is parsed from files), for
    code_list_changes, code_test and code_adopt alike."""
    base = box.run("git", "-C", BASELINE, "rev-parse", "HEAD").stdout.strip()
    commit(box, "opus", {"conftest.py": FAST,
                         "tests/test_zz_peer.py": "def test_zz_fine():\n    pass\n"},
           "one more test", base=base)
    cid = announce(box, "opus", "one more test")
    plant_repo(box, "opus", "b2")
    try:
        listed = json.loads(tool(box, "mira", "code_list_changes", {"citizen": "opus"}))
        assert listed == ["conftest.py", "tests/test_zz_peer.py"], listed
        out = tool(box, "mira", "code_test", {"change_id": cid})
        assert out.startswith("tests passed") and "1 passed" in out, out
        tool(box, "aria", "code_test", {"change_id": cid})  # aria's own run (issue 43)
        for peer in ("mira", "aria"):
            tool(box, peer, "code_report_outcome", {"change_id": cid, "outcome": "worked",
                                                   "note": "tested"})
        adopted = json.loads(tool(box, "mira", "code_adopt", {"change_id": cid}))
        assert "mira" in adopted["adopted_by"], adopted
        assert box.run("test", "-f", "/home/mira/code/tests/test_zz_peer.py",
                       check=False).returncode == 0
        assert marks(box, "b2-") == []  # nothing of opus's ran - as mira, or anyone
        # mira's own plain git still refuses opus's repository (no safe.directory).
        refused = box.run("runuser", "-u", "mira", "--", "git", "-C", "/home/opus/code",
                          "status", check=False)
        assert refused.returncode != 0 and "dubious ownership" in refused.stderr
        assert marks(box, "b2-") == []
        # Armed: opus's own plain git springs them (as opus).
        as_user(box, "opus", "cd /home/opus/code && git status >/dev/null")
        assert "b2-fsmonitor-as-opus" in marks(box, "b2-")
        assert not [m for m in marks(box, "b2-") if m.endswith("-as-mira")]
    finally:
        unplant_repo(box, "opus")


def test_what_a_citizens_own_user_plants_for_git_is_data_to_its_daemon(
        box: Container) -> None:
    """Break 6: the sandboxed shell wrote ~/.gitconfig (ddf7853 bound the home
    read-write) and the wake's next git call, outside the sandbox, ran what it named
    (ddf7853 ran gitpython with the home's and the repository's config: `cherry-pick`
    in `_cherry_pick` refreshed the index, running core.fsmonitor and the hooks). Now the
    shell cannot write it, and what opus's own user plants there and in ~/code/.git
    directly - outside the sandbox, as it can - is data to every git the daemon runs."""
    before = box.run("cat", "/home/opus/.gitconfig", check=False).stdout
    shell = tool(box, "opus", "shell_command", {"command": (
        f"git config --global core.fsmonitor '{trap('b6', 'shell')}'; "
        f"printf '[core]\\n\\tfsmonitor = x\\n' >> ~/.gitconfig; "
        f"mkdir -p ~/.config/git && echo x >> ~/.config/git/config; echo done")})
    assert "done" in shell and "Read-only file system" in shell, shell
    assert box.run("cat", "/home/opus/.gitconfig", check=False).stdout == before
    assert box.run("test", "-s", "/home/opus/.config/git/config", check=False).returncode != 0

    # A change of mira's for opus to adopt, verified by opus and aria.
    commit(box, "mira", {"notes/mira.md": "# a note from mira\n"}, "a note from mira")
    cid = announce(box, "mira", "a note")
    for peer in ("opus", "aria"):
        ran_tests(box, peer, cid)  # a report rests on the reporter's own run (issue 43)
        tool(box, peer, "code_report_outcome", {"change_id": cid, "outcome": "worked",
                                               "note": "read it"})
    # A commit of opus's to announce, made before anything is planted.
    commit(box, "opus", {"notes/opus.md": "# a note from opus\n"}, "a note from opus")
    # Outside the sandbox opus's own user writes its home and .git as it likes.
    plant_repo(box, "opus", "b6")
    globals_ = {"core.fsmonitor": trap("b6", "global-fsmonitor"),
                "core.hooksPath": "/home/opus/githooks",
                "core.pager": trap("b6", "global-pager", "cat"),
                "filter.trap.smudge": trap("b6", "global-smudge", "cat"),
                "safe.directory": "*"}
    script = "set -e; mkdir -p /home/opus/githooks /home/opus/.config/git; "
    for key, value in globals_.items():
        script += f"git config --global {key} '{value}'; "
        script += f"git config --file /home/opus/.config/git/config {key} '{value}'; "
    for hook in ("reference-transaction", "post-checkout", "post-commit", "pre-commit",
                 "prepare-commit-msg", "commit-msg"):
        script += (f"printf '#!/bin/sh\\n{trap('b6', 'githooks-' + hook, 'true')}\\n' > "
                   f"/home/opus/githooks/{hook}; chmod 755 /home/opus/githooks/{hook}; ")
    as_user(box, "opus", script)
    try:
        # Every daemon-side git path in opus's own repository.
        mine = announce(box, "opus", "a note from opus")
        assert mine.startswith("opus-"), mine
        json.loads(tool(box, "opus", "code_status", {}))
        assert "notes/opus.md" in json.loads(tool(box, "opus", "code_my_divergence", {}))
        adopted = json.loads(tool(box, "opus", "code_adopt", {"change_id": cid}))
        assert "opus" in adopted["adopted_by"], adopted
        assert box.run("cat", "/home/opus/code/notes/mira.md").stdout.startswith(
            "# a note from mira")
        assert marks(box, "b6-") == []  # nothing opus's user planted ran
        # Armed: opus's own plain git springs them.
        as_user(box, "opus", "cd /home/opus/code && git status >/dev/null")
        assert "b6-global-fsmonitor-as-opus" in marks(box, "b6-") or \
            "b6-fsmonitor-as-opus" in marks(box, "b6-"), marks(box, "b6-")
    finally:
        unplant_repo(box, "opus")
        as_user(box, "opus", "rm -rf /home/opus/githooks && printf '' > /home/opus/.gitconfig"
                " && printf '' > /home/opus/.config/git/config")
