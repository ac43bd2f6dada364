"""The installed server as a civilization (after test_1_install.py, on the same boot):
code evolution, onboarding, backup and restore, upgrade and removal, consensus and
streams across users with forged records ignored, and a restore on a fresh server.
"""

from __future__ import annotations

import json
import re
from functools import partial
from typing import Any

import pytest

from citizen.config import paths
from citizen.config.secrets import web_token_in
from tests.anthropic_server import API_KEY, MessagesServer
from tests.installed_server import (
    Server,
    forged_weight_lines_move_nothing,
    python_as,
)
from tests.nspawn import PIP_ENV, SETUP, Container, ran_tests, unavailable, until
from tests.thoughtworld import proposal, vote
from tests.web_client import Operator

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

CITIZENS = ("opus", "mira", "aria")
WEB_PORT = 8765  # citizen-web.service's, on the loopback the host shares with the box


APPROVE = f"json.loads({json.dumps(vote())!r})"  # a verifier's or integrator's yes


def consensus_as(server: Server, name: str, code: str) -> str:
    """Python as citizen `name` with its consensus handle `c` (and json, records)."""
    prelude = ("import json; from citizen import civilization, config; "
               "from shared import records; "
               "c = civilization.consensus(config.templates()); ")
    return server.run(*python_as(name), prelude + code)


def proposal_by(server: Server, executor: str, path: str, tool: str = "write_file"
                ) -> tuple[str, dict[str, str]]:
    """A proposal opened and proposed by `executor` as its own user: (id, roles)."""
    out = server.run("citizen", "consensus", "start", "--by", executor, f"Create {path}")
    pid = out.split()[1].rstrip(":")
    roles = json.loads(consensus_as(server, executor,
                                    f"print(json.dumps(c.load('{pid}').roles))"))
    # each its own justification: one repeated from an older proposal is a gaming flag
    body = json.dumps(proposal(path=path, tool=tool, value_justification={
        "truth": f"{path} will hold exactly the text the task asks for, nothing more",
        "transparency": f"the change to {path} is one commit naming this proposal"}))
    consensus_as(server, executor, f"c.propose('{pid}', '{executor}', json.loads({body!r}))")
    return pid, roles


def test_code_evolution_across_users_and_a_forged_report_is_ignored(server: Server) -> None:
    def tool(name: str, tool_name: str, args: dict[str, str]) -> dict[str, Any]:
        out = server.run("runuser", "-u", name, "--", "citizen", "tool", name, tool_name,
                         json.dumps(args))
        answer = json.loads(out)
        assert isinstance(answer, dict), out
        return answer

    server.run("runuser", "-u", "opus", "--", "sh", "-c",
               "cd /home/opus/code && echo '# evolved by opus' >> DEPLOY.md && "
               "git commit -qam 'a note from opus'")
    change = tool("opus", "code_announce", {"description": "a note",
                                            "expected_outcome": "nothing breaks"})
    cid = str(change["id"])
    reports = f"/home/shared/changes/{cid}/reports"
    # mira tries to report in aria's name: the file is mira's, so it does not count.
    ran_tests(server.box, "mira", cid)  # a report rests on the reporter's own run (issue 43)
    tool("mira", "code_report_outcome", {"change_id": cid, "outcome": "worked",
                                         "note": "tested"})
    server.run("runuser", "-u", "mira", "--", "cp", f"{reports}/mira.json",
               f"{reports}/aria.json")
    assert tool("opus", "code_status", {})["pending"] == [cid]
    # aria cannot even replace it (sticky directory); the operator removes the forgery.
    server.run("rm", f"{reports}/aria.json")
    ran_tests(server.box, "aria", cid)
    tool("aria", "code_report_outcome", {"change_id": cid, "outcome": "worked", "note": "ok"})
    adopted = tool("mira", "code_adopt", {"change_id": cid})
    assert adopted["status"] == "merged"
    assert "# evolved by opus" in server.run("tail", "-1", "/home/shared/baseline/DEPLOY.md")
    owners = server.run("stat", "-c", "%U", f"{reports}/mira.json",
                        f"/home/shared/changes/{cid}/announce.json").split()
    assert owners == ["mira", "opus"]


def test_onboard_adds_a_fourth_working_citizen(server: Server) -> None:
    out = server.run("citizen", "onboard", "nova", "--focus", "Testing")
    assert "created user nova" in out and "citizen@nova.service enabled" in out
    assert "already complete" in server.run("citizen", "onboard", "nova")
    # nova plants links where root's onboarding writes or chowns: a re-run refuses them
    server.run("runuser", "-u", "nova", "--", "sh", "-c",
               "cp /home/nova/config.json /home/nova/config.keep && rm /home/nova/config.json"
               " && ln -s /etc/planted /home/nova/config.json && rmdir "
               "/home/shared/doorbell/nova && ln -s /etc /home/shared/doorbell/nova")
    refused = server.box.run("citizen", "onboard", "nova", check=False)
    assert refused.returncode != 0 and "symbolic link" in refused.stderr, refused
    assert server.box.run("test", "-e", "/etc/planted", check=False).returncode != 0
    assert server.run("stat", "-c", "%U", "/etc").strip() == "root"
    server.run("rm", "/home/shared/doorbell/nova", "/home/nova/config.json")
    server.run("runuser", "-u", "nova", "--", "mv", "/home/nova/config.keep",
               "/home/nova/config.json")
    assert "created /home/shared/doorbell/nova" in server.run("citizen", "onboard", "nova")
    server.run("systemctl", "start", "citizen@nova")
    until(lambda: server.sleeping("nova"))
    assert re.search(r"^nova\s+\d+\s+citizen:nova ",
                     server.run("ps", "-eo", "user:12,pid,args"), re.M)


def test_backup_and_restore(server: Server) -> None:
    # Backup and restore of one citizen (DEPLOY.md §6): the timer's command, by hand.
    assert "enabled" in server.run("systemctl", "is-enabled", "experience-backup.timer")
    server.run("systemctl", "start", "experience-backup.service")  # while daemons run
    snaps = json.loads(server.run("citizen", "backup", "list", "--json"))
    assert len(snaps) == 1 and "/home/nova" in snaps[0]["paths"], snaps
    assert snaps[0]["tags"] == ["experience"]  # quiescent: every citizen's lock was taken
    assert "/etc/experience" in snaps[0]["paths"]
    # No citizen can open another's quiescent-point lock, so none can freeze another's
    # daemon (the single 0644 lock of the first version let any citizen take it).
    frozen = server.box.run("runuser", "-u", "mira", "--", "flock", "-n", "-x",
                            "/home/shared/monitor/quiesce/opus.lock", "true", check=False)
    assert frozen.returncode != 0 and "Permission denied" in frozen.stderr, frozen
    server.run("systemctl", "stop", "citizen@nova")
    # nova swaps its contexts for a link to a place of root's: the restore (as root)
    # must not write through it (restic's --target / did, with nova's ownership).
    server.run("install", "-d", "-m", "0755", "/etc/victim")
    server.run("runuser", "-u", "nova", "--", "sh", "-c",
               "rm -rf /home/nova/contexts && ln -s /etc/victim /home/nova/contexts")
    server.run("citizen", "restore", "--from", "latest", "--citizen", "nova")
    assert server.run("ls", "-A", "/etc/victim") == ""
    assert "nova:citizens" in server.run("stat", "-c", "%U:%G", "/home/nova/contexts/identity.json")
    assert "no errors were found" in server.run("citizen", "backup", "verify")
    server.run("systemctl", "start", "citizen@nova")
    until(lambda: server.sleeping("nova"))


def test_upgrade_merges_and_removal(server: Server) -> None:
    # Upgrade (DEPLOY.md §5) after the citizens adopted opus's change to DEPLOY.md
    # (test_code_evolution_…): a release touching other files merges - both survive, in
    # the baseline and in the code of each citizen that holds the change (opus wrote it,
    # nova was cloned from the baseline after it merged). The old setup overwrote the
    # baseline. aria holds out (declines it, issue 30): the release reaches its code,
    # opus's change does not - the old upgrade merged the baseline's main, peers'
    # merged changes included, into every ~/code.
    baseline = "/home/shared/baseline"
    as_experience = ("runuser", "-u", "experience-broker", "--", "git", "-C", baseline)
    assert "# evolved by opus" in server.run("tail", "-1", f"{baseline}/DEPLOY.md")
    status = json.loads(server.run("runuser", "-u", "aria", "--", "citizen", "tool", "aria",
                                   "code_status", "{}"))
    (cid,) = [c["id"] for c in status["changes"] if c["description"] == "a note"]
    declined = json.loads(server.run("runuser", "-u", "aria", "--", "citizen", "tool", "aria",
                                     "code_decline", json.dumps({
                                         "change_id": cid, "reason": "I keep my DEPLOY.md"})))
    assert "aria" in declined["declined_by"], declined
    aria_deploy = server.run("cat", "/home/aria/code/DEPLOY.md")
    assert "# evolved by opus" not in aria_deploy
    # As an install from before upgrades merged: no `release` branch yet.
    server.run(*as_experience, "update-ref", "-d", "refs/heads/release")
    server.run("cp", "-a", "/srv/project", "/root/experience-new")
    server.run("sh", "-c", "echo '# upgraded' >> /root/experience-new/README.md")
    upgrade = server.box.run("/root/experience-new/scripts/setup_server.sh", env=PIP_ENV).stdout
    assert "changed: baseline commit" in upgrade and "merged" in upgrade, upgrade
    assert "changed: /home/nova/code merged the new release" in upgrade, upgrade
    assert "changed: /home/aria/code merged the new release" in upgrade, upgrade
    for where in (baseline, "/home/nova/code", "/home/opus/code"):
        assert "# upgraded" in server.run("tail", "-1", f"{where}/README.md"), where
        assert "# evolved by opus" in server.run("tail", "-1", f"{where}/DEPLOY.md"), where
    # aria held out: the release's line arrives, the declined change does not.
    assert "# upgraded" in server.run("tail", "-1", "/home/aria/code/README.md")
    assert server.run("cat", "/home/aria/code/DEPLOY.md") == aria_deploy
    # A release that changes what the citizens adopted stops, changes nothing, says why.
    head = server.run(*as_experience, "rev-parse", "HEAD")
    server.run("cp", "-a", "/srv/project", "/root/experience-conflict")
    server.run("sh", "-c", "echo '# the vendor disagrees' >> /root/experience-conflict/DEPLOY.md")
    refused = server.box.run("/root/experience-conflict/scripts/setup_server.sh", env=PIP_ENV,
                             check=False)
    assert refused.returncode != 0
    assert "conflict" in refused.stderr and "DEPLOY.md" in refused.stderr, refused.stderr
    assert "merge release-next" in refused.stderr  # how to resolve
    assert server.run(*as_experience, "rev-parse", "HEAD") == head
    assert server.run(*as_experience, "status", "--porcelain") == ""
    assert "# evolved by opus" in server.run("tail", "-1", f"{baseline}/DEPLOY.md")
    assert "# evolved by opus" in server.run("tail", "-1", "/home/nova/code/DEPLOY.md")
    # Resolved by hand as the message says (both lines kept): the next run takes it.
    hand = server.box.run("runuser", "-u", "experience-broker", "-g", "citizens", "--", "git",
                          "-C", baseline, "merge", "release-next", check=False)
    assert "CONFLICT" in hand.stdout, (hand.stdout, hand.stderr)
    server.run("runuser", "-u", "experience-broker", "--", "sh", "-c",
               f"cd {baseline} && git checkout --ours DEPLOY.md && "
               "echo '# the vendor disagrees' >> DEPLOY.md")
    server.run("runuser", "-u", "experience-broker", "-g", "citizens", "--", "git", "-C",
               baseline, "commit", "-a", "--no-edit")
    again = server.box.run("/root/experience-conflict/scripts/setup_server.sh", env=PIP_ENV)
    assert "the release merged by hand is the baseline's release" in again.stdout
    # Offered the release alone, a citizen holding the adopted change meets the conflict
    # the operator resolved in the baseline: its code stays as it was, and it is told.
    assert "note: /home/nova/code keeps its own code: the new release conflicts with it " \
           "in DEPLOY.md" in again.stdout, again.stdout
    assert server.run("tail", "-1", "/home/nova/code/DEPLOY.md").strip() == "# evolved by opus"
    # aria, who declined it, takes the vendor's line cleanly - and still not opus's.
    assert "/home/aria/code merged the new release" in again.stdout, again.stdout
    aria_deploy = server.run("cat", "/home/aria/code/DEPLOY.md")
    assert aria_deploy.rstrip().endswith("# the vendor disagrees")
    assert "# evolved by opus" not in aria_deploy
    server.run("systemctl", "restart", "citizen@nova")
    until(lambda: server.sleeping("nova"))
    removal_leaves_nothing_of_the_citizen(server, "nova")


# Where a citizen's files may be: the operator's rules and secrets, the broker's state,
# runtime files, the homes and the commons, temporary directories, the units.
TREES = ("/etc/experience", "/var/lib/experience-broker", "/run", "/home", "/tmp", "/var/tmp",
         "/dev/shm", "/etc/systemd/system")
# Where a path that merely names it is its (not a peer's record about it, nor the code).
NAMED = ("/etc/experience", "/var/lib/experience-broker", "/run", "/etc/systemd/system")


def removal_leaves_nothing_of_the_citizen(server: Server, name: str) -> None:
    """DEPLOY.md §7 as printed: scripts/remove_citizen.sh, then no file of the citizen is
    left - none its uid owns, none named after it where it kept its own (the old
    procedure left /etc/experience/<name>.env, <name>.json and the quiesce lock)."""
    uid = server.run("id", "-u", name).strip()
    out = server.run("/srv/project/scripts/remove_citizen.sh", name)
    for gone in (f"/etc/experience/{name}.env", f"/etc/experience/{name}.json", f"/home/{name}",
                 f"/home/shared/monitor/quiesce/{name}.lock", f"user {name}"):
        assert f"removed: {gone}" in out, out
    owned = server.run("sh", "-c", f"find {' '.join(TREES)} -xdev -uid {uid} -print "
                       "2>/dev/null || true")
    assert owned == "", owned
    named = server.run("sh", "-c", f"find {' '.join(NAMED)} -xdev -name '*{name}*' -print "
                       "2>/dev/null; find /home /home/shared/doorbell /home/shared/monitor "
                       f"-maxdepth 2 -name '*{name}*' -print 2>/dev/null; true")
    assert named == "", named
    assert server.box.run("id", name, check=False).returncode != 0
    assert server.run("systemctl", "list-units", "--all", "--no-legend", "--plain",
                      f"citizen@{name}.service").strip() == ""
    assert name not in server.run("citizen", "status")
    # A second run (or one after a removal by hand) finds nothing left and says so.
    assert f"{name} is gone" in server.run("/srv/project/scripts/remove_citizen.sh", name)


def test_consensus_across_users_and_forged_steps_are_ignored(server: Server) -> None:
    """Each step as its own Unix user: a vote or a human approval written by the wrong
    citizen does not count; the world repository takes commits from two executors."""
    as_user = partial(consensus_as, server)
    run_proposal = partial(proposal_by, server)
    approve = APPROVE
    pid, roles = run_proposal("opus", "hello.md")
    v, i = roles["verifier"], roles["integrator"]
    folder = f"/home/shared/proposals/records/{pid}"
    # the integrator writes the verifier's vote; a citizen writes a human approval
    as_user(i, f"records.create(c.shared, c.records_dir / '{pid}' / 'verify-01.json', "
               f"{{'citizen': '{v}', 'decision': 'approve'}})")
    as_user("opus", f"records.create(c.shared, c.records_dir / '{pid}' / 'human.json', "
                    "{'operator': 'root', 'decision': 'approve'})")
    state = json.loads(as_user("opus", f"d = c.load('{pid}'); "
                                       "print(json.dumps([d.phase, d.human]))"))
    assert state == ["verify", None]
    # The pre-created vote does not block the verifier: its vote goes beside the forgery
    # under a name nobody could guess, and every reader takes the file it owns.
    as_user(v, f"c.verify('{pid}', '{v}', {approve})")
    assert json.loads(as_user("aria", f"print(json.dumps(c.load('{pid}').phase))")) \
        == "integrate"
    beside = server.run("sh", "-c", f"stat -c '%U %n' {folder}/verify-01.json~*").split()
    assert beside[0] == v and beside[1].startswith(f"{folder}/verify-01.json~{v}-")
    as_user(i, f"c.integrate('{pid}', '{i}', {approve})")
    as_user("opus", f"import os; c.execute('{pid}', 'opus', dict(os.environ))")
    as_user(v, f"c.check('{pid}', '{v}', {{'outcomes_verified': True}})")
    as_user(i, f"c.record('{pid}', '{i}', {{'key_learnings': ['ok'], 'weight_adjustments': "
               f"[{{'citizen': 'opus', 'value': 'safety', 'delta': 0.05, 'reason': 'r'}}]}})")
    assert "approved" in server.run("citizen", "proposal", "show", pid)
    assert "no proposals waiting for a human" in server.run("citizen", "proposals", "--human")
    # a second executor commits into the repository the first one created
    pid2, roles2 = run_proposal("mira", "second.md")
    as_user(roles2["verifier"], f"c.verify('{pid2}', '{roles2['verifier']}', "
                                f"{approve})")
    as_user(roles2["integrator"], f"c.integrate('{pid2}', '{roles2['integrator']}', "
                                  f"{approve})")
    as_user("mira", f"import os; c.execute('{pid2}', 'mira', dict(os.environ))")
    log = server.run("runuser", "-u", "aria", "--", "git", "-c",
                     "safe.directory=/home/shared/world", "-C", "/home/shared/world", "log",
                     "--format=%an %s")
    assert log.splitlines()[:2] == [f"mira {pid2}: Create second.md with the greeting",
                                    f"opus {pid}: Create hello.md with the greeting"]
    owners = server.run("stat", "-c", "%U", f"{folder}/proposal-01.json",
                        f"{folder}/verify-01.json", f"{folder}/execution.json").split()
    assert owners == ["opus", i, "opus"]  # the forgery stays, for the operator to see
    assert "opus" in server.run("cat", "/home/shared/values/weight_history.jsonl")
    forged_weight_lines_move_nothing(as_user, pid, i)
    # high stakes wait for an operator: root's decision counts, as the one before did not
    pid3, roles3 = run_proposal("aria", "second.md", tool="delete_file")
    as_user(roles3["verifier"], f"c.verify('{pid3}', '{roles3['verifier']}', {approve})")
    as_user(roles3["integrator"], f"c.integrate('{pid3}', '{roles3['integrator']}', "
                                  f"{approve})")
    assert pid3 in server.run("citizen", "proposals", "--human")
    # a citizen's "human" approval does not count, and does not block the person's
    as_user("aria", f"records.create(c.shared, c.records_dir / '{pid3}' / 'human.json', "
                    "{'operator': 'root', 'decision': 'approve'})")
    assert pid3 in server.run("citizen", "proposals", "--human")
    assert "next: execute" in server.run("citizen", "approve", pid3)
    # root's decision went beside the planted file, in a folder root now owns
    assert server.run("sh", "-c", f"stat -c %U /home/shared/proposals/records/{pid3} "
                      f"/home/shared/proposals/records/{pid3}/human.json~operator-*"
                      ).split() == ["root", "root"]
    pid4, _ = run_proposal("opus", "third.md")
    assert "next: record" in server.run("citizen", "reject", pid4, "--why", "not now")


def test_streams_across_users_and_a_forged_thought_is_ignored(server: Server) -> None:
    """A stream opened by one citizen, bid on by each as its own Unix user: a thought
    written in another's name does not count, and only the granted may answer."""
    def as_user(name: str, code: str, check: bool = True) -> str:
        prelude = "import json; from citizen import civilization; s = civilization.streams(); "
        done = server.box.run(*python_as(name), prelude + code, check=check)
        return done.stdout if check else done.stderr

    sid = as_user("opus", "print(s.open('<locks@example.org>', 'Who knows file locks?', "
                          "participants=['opus', 'mira', 'aria'], sender='op@example.org').id)"
                  ).strip()
    # mira writes a thought in opus's name: the file is mira's, so it is not opus's bid
    as_user("mira", f"from shared import records; records.create(s.shared, s.dir / '{sid}' / "
                    "'thoughts' / 'opus.json', {'citizen': 'opus', 'claiming': True, "
                    "'confidence': 1.0, 'ts': 0})")
    as_user("mira", f"s.think('{sid}', 'mira', True, 0.6, 'I know flock')")
    as_user("aria", f"s.think('{sid}', 'aria', False, 0.2, 'not mine')")
    seen = json.loads(as_user("aria", f"print(json.dumps(sorted(s.load('{sid}').thoughts)))"))
    assert seen == ["aria", "mira"]  # the forged one is ignored by every reader
    decided = json.loads(as_user("aria", f"print(json.dumps(s.try_decide('{sid}', 'aria', "
                                         "now=10**10)))"))
    assert "opus" not in decided["granted"] and decided["granted"][0] == "mira"
    refused = as_user("opus", f"s.respond('{sid}', 'opus', 'me too')", check=False)
    assert "opus does not have the floor" in refused
    as_user("mira", f"s.respond('{sid}', 'mira', 'flock(2) serialises writers')")
    shown = server.run("citizen", "decisions", "show", sid)
    assert "mira answered: flock(2) serialises writers" in shown
    # A room's governance is the operator's: mira heats the room, then writes into the
    # shared room document (hers now) a silence of opus, a pause and a boost for herself
    # - none counts; root's `citizen room set` does.
    as_user("mira", "s.heat('general', 'human'); s.rooms.document('general').update("
                    "lambda d: d.update({'preset': 'balanced', 'changes': {'silenced': "
                    "['opus'], 'paused': True, 'boosted': [['mira', 0.5]]}}))")
    governed = "g = s.settings('general'); print(json.dumps([g.silenced, g.paused]))"
    assert json.loads(as_user("aria", governed)) == [[], False]
    server.run("citizen", "room", "set", "general", "--silence", "opus")
    assert json.loads(as_user("aria", governed)) == [["opus"], False]


def test_the_dashboard_approves_and_watches_through_roots_helper(server: Server) -> None:
    """The operator's page as the web user under its unit, through root's helper: a
    proposal that waits for a person is approved from the page (not without the CSRF
    value) and root's decision is recorded; a citizen's user asking the helper itself
    is refused; a room's page held open marks a person watching, closed it does not."""
    pid, roles = proposal_by(server, "aria", "web.md", tool="delete_file")  # high stakes
    # A concern named: a verifier that is a red-team review must name one, whatever it says.
    yes = f"json.loads({json.dumps(vote('approve', 'web.md may be read by a tool'))!r})"
    consensus_as(server, roles["verifier"], f"c.verify('{pid}', '{roles['verifier']}', {yes})")
    consensus_as(server, roles["integrator"], f"c.integrate('{pid}', "
                                              f"'{roles['integrator']}', {yes})")
    server.run("systemctl", "enable", "--now", "citizen-web")
    token = web_token_in(server.run("cat", "/etc/experience/web.token"))
    assert token
    page = Operator(WEB_PORT)
    until(page.up, timeout=60)
    page.log_in(token)
    status, queue = page.get("/decisions")
    assert status == 200 and pid in queue
    # The broker's state (0700) reaches the page through its views: nothing "unknown".
    assert "Could not read" not in queue and "No quarantined mail." in queue, queue
    status, money = page.get("/money")
    assert status == 200 and "Could not read" not in money and "None refused." in money
    path = f"/decisions/proposals/{pid}"
    assert page.post(path, {"decision": "approve"})[0] == 403  # no CSRF value
    assert pid in server.run("citizen", "proposals", "--human")
    # A citizen's user at root's helper, with the right token: the socket (0660
    # root:experience-web) does not even let it connect (and SO_PEERCRED would refuse it:
    # test_web_facts::test_roots_helper_records_only_for_the_web_user_with_the_token).
    asks = ("import json, socket; s = socket.socket(socket.AF_UNIX); "
            "s.connect('/run/experience-approve.sock'); s.sendall(json.dumps({'action': "
            f"'decide', 'proposal': '{pid}', 'approve': True, 'why': '', 'operator': 'x', "
            f"'token': {token!r}}}).encode() + b'\\n'); print(s.recv(4096).decode())")
    refused = server.box.run(*python_as("mira"), asks, check=False)
    assert refused.returncode != 0 and "PermissionError" in refused.stderr, refused
    assert pid in server.run("citizen", "proposals", "--human")
    status, shown = page.post(path, {"decision": "approve", "csrf": page.csrf(path)})
    assert status == 200 and "Recorded: approve" in shown, shown[:500]
    assert pid not in server.run("citizen", "proposals", "--human")
    assert server.run("sh", "-c", f"stat -c %U /home/shared/proposals/records/{pid}/human*"
                      ).split()[0] == "root"
    room = "/home/shared/streams/rooms/general.json"

    def watched() -> object:
        return json.loads(server.run("cat", room)).get("present")

    with page.watching("/decisions/rooms/general/presence") as facts:
        assert "Temperature" in facts
        until(lambda: watched() is True, timeout=30)
    until(lambda: watched() is False, timeout=30)
    journal = server.run("journalctl", "--no-pager", "-u", "experience-approve@*")
    assert f"{pid} approved" in journal


def test_a_fresh_server_restores_the_civilization(server: Server,
                                                  messages_api: MessagesServer) -> None:
    """DEPLOY.md §6 onto a new machine: setup, the repository and key copied back,
    restore; the daemons start and a task and a proposal left pending carry on."""
    from tests.daemons import worker

    server.run("systemctl", "stop", "citizens.target")
    server.run("citizen", "task", "add", "opus", "Write notes/out.md after the move")
    pid = server.run("citizen", "proposal", "start", "--by", "mira",
                     "Create moved.md").split()[1].rstrip(":")
    server.run("citizen", "backup", "now")
    carried = server.run("sh", "-c", "tar -C / -czf - var/backups/experience "
                         "etc/experience/backup.key | base64 -w0")
    fresh = Container(paths.project_dir(), name="experience-restore")
    fresh.boot()
    try:
        fresh.run(SETUP, env=PIP_ENV, timeout=900)
        fresh.run("systemctl", "stop", "citizens.target")
        fresh.run("sh", "-c", "base64 -d | tar -C / -xzf -", input=carried)
        restored = fresh.run("citizen", "restore", "--from", "latest").stdout
        assert "restored /home/opus" in restored and "restored /home/shared" in restored
        # The old server's model endpoint is gone: point opus at this test's.
        fresh.run("sh", "-c", f"printf 'ANTHROPIC_API_KEY={API_KEY}\\nANTHROPIC_BASE_URL="
                  f"{messages_api.url}\\n' >> /etc/experience/opus.env")
        messages_api.responder = worker
        fresh.run("systemctl", "start", "citizens.target")
        def up(name: str) -> bool:
            state = fresh.run("systemctl", "show", "-p", "StatusText", "--value",
                              f"citizen@{name}").stdout
            return f"citizen:{name} sleeping" in state or f"citizen:{name} waking" in state
        for name in CITIZENS:
            until(partial(up, name))
        until(lambda: fresh.run("grep", "-rlq", "after the move", "/home/opus/tasks/done",
                                check=False).returncode == 0, 120)
        assert fresh.run("cat", "/home/opus/notes/out.md").stdout == "from the daemon"
        assert pid in fresh.run("citizen", "proposal", "list").stdout
        assert "nova" not in fresh.run("citizen", "status").stdout  # removed before the move
    finally:
        fresh.shutdown()
