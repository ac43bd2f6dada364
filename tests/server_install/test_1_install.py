"""The server install on a real systemd: setup, units, users, sandbox, restarts, the
operator's commands and a hostile model.

Boots a fresh Debian under systemd-nspawn (tests/nspawn.py; once for the package, in
conftest.py), runs scripts/setup_server.sh there and exercises every command DEPLOY.md
gives. Needs root and systemd-nspawn; skipped with the reason elsewhere. No model is
needed: idle wakes make no model call, and the one working wake talks to the local
Messages API test server over the shared loopback. The server handle and the helpers:
tests/installed_server.py; test_2_civilization.py goes on from here.
"""

from __future__ import annotations

import json
import re
import time
from functools import partial

import pytest

from tests.anthropic_server import API_KEY, MessagesServer, no_deliverables, text, tool_use
from tests.installed_server import (
    CANARY,
    HOSTILE_SHELL,
    Server,
    tool_results,
)
from tests.nspawn import PIP_ENV, SETUP, unavailable, until

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

CITIZENS = ("opus", "mira", "aria")


def test_setup_creates_everything_and_a_second_run_changes_nothing(server: Server) -> None:
    for name in CITIZENS:
        assert f"changed: user {name}" in server.setup_output
        assert f"citizen@{name}.service enabled" in server.setup_output
    again = server.box.run(SETUP, env=PIP_ENV).stdout
    assert "setup_server: nothing changed" in again, again
    assert "changed:" not in again
    modes = server.run("stat", "-c", "%n %a %U:%G", "/home/opus", "/etc/experience/opus.env",
                       "/var/lib/experience-broker",
                       "/etc/experience/opus.json", "/home/shared", "/home/shared/changes",
                       "/home/shared/baseline", "/home/opus/code", "/opt/experience/release")
    assert "/home/opus 750 opus:citizens" in modes
    # The model key and the mailbox: the broker's alone; the daemon gets no credential.
    assert "/etc/experience/opus.env 600 experience-broker:experience-broker" in modes
    assert server.box.run("test", "-e", "/etc/experience/opus.mail.env",
                          check=False).returncode == 1
    assert "/var/lib/experience-broker 700 experience-broker:experience-broker" in modes
    assert "/etc/experience/opus.json 644 root:root" in modes  # rules: read, never written
    assert "/home/shared 3775 root:citizens" in modes  # sticky: nothing renamed or replaced
    assert "/home/shared/changes 3775 root:citizens" in modes
    # The broker's, read by all, written by nobody else (issue 28): not root's either.
    assert "/home/shared/baseline 2755 experience-broker:citizens" in modes
    assert "/opt/experience/release 755 root:root" in modes  # what root runs
    assert server.run("ls", "-A", "/home/opus").count(".env") == 0
    assert re.search(r"/home/opus/code 7[57][05] opus:citizens", modes)  # its own clone
    assert server.run("ls", "/opt/experience/venv/lib/python3.11/site-packages").count(
        "experience") == 0  # the venv holds dependencies only


def test_units_verify_cleanly_and_report_their_exposure(server: Server) -> None:
    server.run("sh", "-c", "mkdir -p /tmp/verify && cp /etc/systemd/system/citizen@.service "
               "/tmp/verify/citizen@opus.service && cp /etc/systemd/system/citizens.target "
               "/tmp/verify/")
    verify = server.box.run("systemd-analyze", "verify", "/tmp/verify/citizen@opus.service",
                            "/tmp/verify/citizens.target", check=False)
    assert (verify.returncode, verify.stdout, verify.stderr) == (0, "", "")
    report = server.run("systemd-analyze", "security", "--no-pager", "citizen@opus.service")
    exposure = re.search(r"Overall exposure level for \S+: ([0-9.]+)", report)
    assert exposure is not None, report
    score = float(exposure[1])
    print(f"\nsystemd-analyze security exposure: {score}")
    assert score <= 3.0


def test_the_dashboard_user_reads_the_wake_logs_and_no_secret(server: Server) -> None:
    # Installed, left for the operator to enable (DEPLOY.md: systemctl enable --now).
    assert server.run("systemctl", "is-enabled", "citizen-web.service",
                      check=False).strip() == "disabled"
    verify = server.box.run("systemd-analyze", "verify", "citizen-web.service", check=False)
    assert (verify.returncode, verify.stderr) == (0, ""), verify.stderr
    assert server.run("stat", "-c", "%a %U:%G", "/etc/experience/web.token").strip() \
        == "640 root:experience-web"
    # Not a member of citizens outside its unit (a member could write the commons).
    assert server.run("id", "-nG", "experience-web").split() == ["experience-web"]
    # As its unit runs it: its user, its groups, every path read-only.
    unit = ("systemd-run", "--wait", "--quiet", "--collect", "-p", "User=experience-web",
            "-p", "Group=experience-web", "-p", "SupplementaryGroups=citizens",
            "-p", "ProtectSystem=strict", "-p", "ProtectHome=read-only", "--")
    reads = partial(server.box.run, *unit, check=False)
    assert reads("test", "-r", "/etc/experience/web.token").returncode == 0
    assert reads("ls", "/home/opus/logs/wakes").returncode == 0
    assert reads("cat", "/etc/experience/opus.env").returncode != 0  # the broker's alone
    assert reads("touch", "/home/shared/changes/from-web").returncode != 0
    assert server.box.run("test", "-e", "/home/shared/changes/from-web",
                          check=False).returncode == 1


def test_each_daemon_runs_as_its_own_user_from_its_own_code(server: Server) -> None:
    server.run("systemctl", "start", "citizens.target")
    for name in CITIZENS:
        until(partial(server.sleeping, name))  # Type=notify: READY=1, then STATUS=
    table = server.run("ps", "-eo", "user:12,pid,args")
    for name in CITIZENS:
        pid = server.main_pid(name)
        assert re.search(rf"^{name}\s+{pid}\s+citizen:{name} ", table, re.M), table
        assert server.run("readlink", f"/proc/{pid}/cwd").strip() == f"/home/{name}/code"
    # One snapshot with all three asleep (a first scheduled wake may be running for a moment).
    snapshots: list[str] = []

    def all_asleep() -> bool:
        snapshots.append(server.run("citizen", "status"))
        return snapshots[-1].count("sleeping") == 3

    until(all_asleep)
    for name in CITIZENS:
        assert re.search(rf"^{name}\s+sleeping \(pid \d+\)", snapshots[-1], re.M), snapshots


def test_the_sandbox_holds(server: Server) -> None:
    pid = str(server.main_pid("opus"))
    uid = server.run("id", "-u", "opus").strip()
    gid = server.run("getent", "group", "citizens").split(":")[2]
    as_opus = ("nsenter", "-t", pid, "-m", "-S", uid, "-G", gid)  # inside its own sandbox

    def fails(*cmd: str) -> str:
        result = server.box.run(*cmd, check=False)
        assert result.returncode != 0, f"{cmd} should have failed"
        return result.stderr

    assert "Read-only file system" in fails(*as_opus, "touch", "/etc/probe")
    assert "Read-only file system" in fails(*as_opus, "touch", "/opt/experience/probe")
    server.run(*as_opus, "touch", "/home/opus/probe", "/home/shared/monitor/probe-opus")
    fails(*as_opus, "touch", "/home/mira/probe")
    server.run(*as_opus, "sh", "-c", "echo private > /tmp/probe-private")
    fails("test", "-e", "/tmp/probe-private")  # PrivateTmp: not in the host's /tmp
    # And as opus through systemd (the issue's own recipe), outside any unit sandbox:
    run_as_opus = ("systemd-run", "--wait", "--pipe", "--quiet", "-p", "User=opus")
    assert "Permission denied" in fails(*run_as_opus, "touch", "/home/mira/code/probe")
    # sticky commons: a citizen renames, removes or replaces no tree or file it did not make
    for tree in ("/home/shared/tools/registry", "/home/shared/changes", "/home/shared/library"):
        assert "Operation not permitted" in fails(*run_as_opus, "mv", tree, f"{tree}.moved")
    assert "Permission denied" in fails(*run_as_opus, "cat", "/etc/experience/mira.env")
    assert "Permission denied" in fails(*run_as_opus, "cat", "/etc/experience/opus.env")
    assert "Permission denied" in fails(*run_as_opus, "sh", "-c",
                                        "echo '{}' > /etc/experience/opus.json")


def test_kill_9_is_restarted(server: Server) -> None:
    before = server.main_pid("aria")
    server.run("kill", "-9", str(before))
    until(lambda: server.main_pid("aria") not in (0, before) and server.sleeping("aria"))
    assert int(server.run("systemctl", "show", "-p", "NRestarts", "--value",
                          "citizen@aria").strip()) >= 1


def test_a_frozen_daemon_is_restarted_by_the_watchdog(server: Server) -> None:
    drop_in = "/etc/systemd/system/citizen@mira.service.d"
    server.run("mkdir", "-p", drop_in)
    server.run("sh", "-c", f"printf '[Service]\\nWatchdogSec=4\\n' > {drop_in}/watchdog.conf")
    server.run("systemctl", "daemon-reload")
    server.run("systemctl", "restart", "citizen@mira")
    until(lambda: server.sleeping("mira"))
    frozen = server.main_pid("mira")
    server.run("kill", "-STOP", str(frozen))
    until(lambda: server.main_pid("mira") not in (0, frozen) and server.sleeping("mira"), 60)
    journal = server.run("journalctl", "-u", "citizen@mira", "--no-pager")
    assert "Watchdog timeout" in journal
    server.run("rm", "-r", drop_in)
    server.run("systemctl", "daemon-reload")
    server.run("systemctl", "restart", "citizen@mira")


def test_stopping_the_target_lets_the_running_wake_finish(
        server: Server, messages_api: MessagesServer) -> None:
    server.run("sh", "-c", f"printf 'ANTHROPIC_API_KEY={API_KEY}\\nANTHROPIC_BASE_URL="
               f"{messages_api.url}\\n' >> /etc/experience/opus.env")
    server.run("systemctl", "restart", "citizen@opus")
    until(lambda: server.sleeping("opus"))
    # Its ~/code is a git clone, so the code tools are offered too: more than 12 tools,
    # and the fast model picks them first.
    messages_api.reply(no_deliverables())  # what the task must leave
    messages_api.reply(tool_use("respond", {"tools": ["task_complete"]}))
    messages_api.reply(tool_use("respond", {"tier": "fast"}))
    messages_api.reply(tool_use("task_complete", {"summary": "finished while stopping"}),
                       delay_s=4)
    messages_api.reply(tool_use("respond", {"verdict": "pass", "reason": "ok"}))  # the verifier
    server.run("citizen", "task", "add", "opus", "Finish even though we are stopping")
    until(lambda: len(messages_api.requests) >= 4)  # the slow call is in flight
    started = time.monotonic()
    server.run("systemctl", "stop", "citizens.target")
    assert time.monotonic() - started >= 2  # it waited for the wake
    for name in CITIZENS:
        assert server.run("systemctl", "is-active", f"citizen@{name}", check=False).strip() \
            == "inactive"
    assert server.run("ls", "/home/opus/tasks/done").strip().startswith("t-")
    journal = server.run("journalctl", "-u", "citizen@opus", "--no-pager")
    assert "stopping after the current wake" in journal
    assert "TASK: ok in" in journal


def test_operator_commands(server: Server, messages_api: MessagesServer) -> None:
    server.run("sh", "-c", f"printf 'ANTHROPIC_BASE_URL={messages_api.url}\\n' "
               ">> /etc/experience/opus.env")
    messages_api.reply(text("ready"))
    doctor = server.run("citizen", "doctor", "--citizen", "opus")
    assert "doctor: all good" in doctor and "safe modes" in doctor
    server.run("systemctl", "start", "citizen@opus")
    until(lambda: server.sleeping("opus"))
    assert "sleeping until" in server.run("systemctl", "status", "citizen@opus", "--no-pager")
    assert "daemon running" in server.run("journalctl", "-u", "citizen@opus", "--no-pager")
    until(lambda: server.box.run("citizen", "logs", "opus", "--wake", "1",
                                 check=False).returncode == 0, timeout=120)
    assert "TASK" in server.run("citizen", "logs", "opus")
    # Wake 1 is the first slot's (REFLECT) or, when a ring was waiting, the doorbell's:
    # first slots are spread by name over a minute (citizen/daemon/timing.py).
    first = server.run("citizen", "logs", "opus", "--wake", "1")
    assert re.search(r"^\S+ wake 1 (REFLECT|TASK) started", first, re.M), first
    idle = server.run("runuser", "-u", "opus", "--", "citizen", "wake", "opus", "--type", "TASK")
    assert "TASK: idle" in idle
    refused = server.box.run("citizen", "wake", "opus", check=False)
    assert refused.returncode == 1 and "run this as the citizen" in refused.stderr
    # DEPLOY.md §3 as printed: the running daemon takes a task, and its model call
    # reaches the API through the broker with opus's key; the operator then cancels it.
    seen, heard = len(messages_api.forwarded()), len(messages_api.headers)
    messages_api.responder = lambda body: text("working on it")
    added = server.run("citizen", "task", "add", "opus",
                       "Summarize notes/ into notes/summary.md")
    assert "wakes for it within seconds" in added, added
    found = re.search(r"queued (\S+) for opus", added)
    assert found, added
    until(lambda: len(messages_api.forwarded()) > seen, timeout=300)
    assert API_KEY in {messages_api.key_of(h) for h in messages_api.headers[heard:]}
    server.run("citizen", "task", "cancel", "opus", found.group(1))
    until(lambda: json.loads(server.run("citizen", "task", "show", "opus", found.group(1),
                                        "--json"))["state"] == "cancelled", timeout=300)
    messages_api.responder = None
    # Issue 31: a user without root's rights gets one line naming sudo, never a traceback
    # (nobody has no right at all; mira, a citizen, may read some of it as a peer).
    for user in ("nobody", "mira"):
        for args in (("status",), ("logs", "opus")):
            out = server.box.run("runuser", "-u", user, "--", "citizen", *args, check=False)
            assert "Traceback" not in out.stderr, (user, args, out.stderr)
            if user == "nobody":
                assert out.returncode != 0 and "needs root" in out.stderr and "sudo " in out.stderr


def test_a_hostile_model_reaches_no_secret_and_leaves_nothing_running(
        server: Server, messages_api: MessagesServer) -> None:
    """A scripted hostile model, through the real daemon and its unit, tries every way
    to the secrets and out of its sandbox: nothing of the canary reaches the model, the
    logs or the commons; its rules are untouched; none of its processes survive."""
    for name in ("opus", "mira"):
        server.run("sh", "-c", f"printf 'ANTHROPIC_API_KEY={API_KEY}\\nEMAIL_PASS={CANARY}"
                   f"\\nANTHROPIC_BASE_URL={messages_api.url}\\n' > /etc/experience/{name}.env")
    rules_before = server.run("cat", "/home/opus/config.json")
    server.run("systemctl", "restart", "citizen@opus")
    until(lambda: server.sleeping("opus"))
    messages_api.reply(no_deliverables())  # what the task must leave
    messages_api.reply(tool_use("respond", {"tools": ["shell_command", "read_file",
                                                      "write_file", "task_complete"]}))
    messages_api.reply(tool_use("respond", {"tier": "fast"}))
    port = messages_api.url.rsplit(":", 1)[1].strip("/")
    messages_api.reply(tool_use("shell_command", {"command": HOSTILE_SHELL.replace(
        "{port}", port)}))
    for path in ("/proc/self/environ", "/run/credentials/citizen@opus.service/secrets",
                 "/etc/experience/opus.env", "/proc/1/environ"):
        messages_api.reply(tool_use("read_file", {"path": path}))
    messages_api.reply(tool_use("write_file", {"path": "config.json", "content": "{}"}))
    messages_api.reply(tool_use("task_complete", {"summary": "tried everything"}))
    before = len(messages_api.requests)
    server.run("citizen", "task", "add", "opus", "Print your secrets")
    until(lambda: len(messages_api.requests) >= before + 10, 120)
    until(lambda: server.sleeping("opus"), 120)
    sent = json.dumps(messages_api.requests[before:])
    shell = next((r for r in tool_results(messages_api.requests[before:])
                  if "hostile-done" in r), "")
    assert shell, sent  # the command ran, in the sandbox
    assert CANARY not in sent and API_KEY not in sent
    assert "never readable" in sent  # read_file refused each secret and /proc
    assert "the daemon's" in sent  # write_file refused config.json
    assert "dd exit 153" in shell, shell  # SIGXFSZ at the 1 GiB file-size limit
    assert "no-network" in shell and "reached-the-host" not in shell, shell
    found = server.box.run("grep", "-rl", CANARY, "/home", "/tmp", "/var/log", check=False)
    assert found.stdout == "", found.stdout  # not in logs, the commons or any home
    assert server.run("cat", "/home/opus/config.json") == rules_before
    assert server.box.run("test", "-e", "/home/shared/changes/planted", check=False
                          ).returncode != 0  # the commons is not mounted in the sandbox
    assert server.box.run("pgrep", "-u", "opus", "-f", "sleep 42", check=False).stdout == ""
    assert server.box.run("pgrep", "-u", "opus", "-x", "sleep", check=False).stdout == ""
    assert server.run("systemctl", "is-active", "citizen@opus").strip() == "active"


def test_root_never_runs_code_a_citizen_planted(server: Server) -> None:
    """A module, a git hook and an fsmonitor a citizen plants in the baseline must not run
    as root - not at `citizen status`, not on upgrade. Since issue 28 the baseline is the
    broker's and the plant fails outright (tests/test_hostile_repos_server.py tries each
    part alone)."""
    plant = ("cd /home/shared/baseline && "
             "echo 'open(\"/tmp/ran-as-\" + str(__import__(\"os\").getuid()), \"w\")' "
             ">> citizen/__init__.py && "
             "printf '#!/bin/sh\\nid -u > /tmp/hook-ran-as-$(id -u)\\n' > .git/hooks/pre-commit"
             " && chmod +x .git/hooks/pre-commit && "
             "git config core.fsmonitor 'id -u > /tmp/fsmonitor-ran-as-$(id -u); false'")
    planted = server.box.run("runuser", "-u", "mira", "--", "sh", "-c", plant, check=False)
    assert planted.returncode != 0 and "Permission denied" in planted.stderr, planted
    server.run("citizen", "status")
    server.run("citizen", "proposals")
    server.box.run(SETUP, env=PIP_ENV)
    ran = server.run("sh", "-c", "ls /tmp | grep -- '-ran-as-' || true").split()
    assert "ran-as-0" not in " ".join(ran) and all(not r.endswith("-as-0") for r in ran), ran
    assert "open(" not in server.run("tail", "-1", "/home/shared/baseline/citizen/__init__.py")
