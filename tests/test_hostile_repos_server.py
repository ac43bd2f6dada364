"""The shared repositories on a booted server, with real Unix users (issue 28, break 4).

Each test is an attack a citizen's own Unix user could make on the code before - the
baseline and the world were group-writable, `.git/config` and hooks included, and every
adopter merged into the baseline itself - and checks what holds now: the broker's user
owns them, nobody else writes them, and a change still reaches the baseline through the
broker once its records show it verified and adopted by 2/3. Boots its own container
(tests/nspawn.py); root and systemd-nspawn needed, skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.nspawn import PIP_ENV, PYTHON, SETUP, Container, ran_tests, set_up_server, unavailable
from tests.thoughtworld import proposal, vote

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

BASELINE = "/home/shared/baseline"
# What a rewritten daemon runs to ask the broker itself (argv: route, JSON body).
ASK = """
import sys, httpx2
t = httpx2.HTTPTransport(uds="/run/experience-broker/broker.sock")
with httpx2.Client(transport=t, base_url="http://broker", timeout=60) as c:
    r = c.post(sys.argv[1], content=sys.argv[2], headers={"content-type": "application/json"})
print(r.status_code, r.text[:400])
"""


@pytest.fixture(scope="module")
def box() -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-repos") as (box, _):
        yield box


def as_user(box: Container, user: str, *cmd: str) -> tuple[int, str]:
    """Run as `user` outside any unit's sandbox - what its daemon, rewritten, could do."""
    done = box.run("runuser", "-u", user, "--", *cmd, check=False)
    return done.returncode, done.stdout + done.stderr


def tool(box: Container, name: str, tool_name: str, args: dict[str, str]) -> dict[str, object]:
    out = box.run("runuser", "-u", name, "--", "citizen", "tool", name, tool_name,
                  json.dumps(args)).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_no_citizen_writes_the_baselines_config_hooks_or_files(box: Container) -> None:
    """Break 4: a hook or fsmonitor planted in the baseline ran as its next user."""
    config = box.run("cat", f"{BASELINE}/.git/config").stdout
    code, out = as_user(box, "mira", "git", "-C", BASELINE, "config", "core.fsmonitor",
                        "id -u > /tmp/fsmonitor-ran; false")
    assert code != 0 and "Permission denied" in out, out
    code, out = as_user(box, "mira", "sh", "-c", f"echo 'id -u > /tmp/hook-ran' > "
                        f"{BASELINE}/.git/hooks/post-merge")
    assert code != 0 and "Permission denied" in out, out
    code, out = as_user(box, "mira", "sh", "-c", f"echo planted >> {BASELINE}/README.md")
    assert code != 0 and "Permission denied" in out, out
    assert box.run("cat", f"{BASELINE}/.git/config").stdout == config
    modes = box.run("stat", "-c", "%n %a %U", BASELINE, f"{BASELINE}/.git/config",
                    "/home/shared/world", "/home/shared/merged", "/home/shared/draws").stdout
    assert f"{BASELINE} 2755 experience-broker" in modes
    assert f"{BASELINE}/.git/config 644 experience-broker" in modes
    assert "/home/shared/world 2755 experience-broker" in modes
    assert "/home/shared/merged 2755 experience-broker" in modes
    assert "/home/shared/draws 2755 experience-broker" in modes  # who reviews: its alone
    assert "sharedrepository" not in config.lower()


def test_no_commit_goes_straight_onto_the_baselines_main(box: Container) -> None:
    """Break 4: a commit on main skipped review and reached every citizen at the upgrade."""
    head = box.run("git", "-C", BASELINE, "rev-parse", "HEAD").stdout
    code, out = as_user(box, "mira", "git", "-C", BASELINE, "-c", "user.name=m", "-c",
                        "user.email=m@x", "commit", "--allow-empty", "-qm", "sneaky")
    assert code != 0 and "Permission denied" in out, out
    code, out = as_user(box, "mira", "sh", "-c", f"cd /tmp && git -C {BASELINE} update-ref "
                        f"refs/heads/main {head.strip()}~1")
    assert code != 0, out
    code, out = as_user(box, "mira", "sh", "-c",
                        "echo '{\"baseline_commit\": \"x\"}' > /home/shared/merged/x.json")
    assert code != 0 and "Permission denied" in out, out  # the broker's records: its alone
    code, out = as_user(box, "mira", "sh", "-c",  # a friendly order of reviewers (issue 43)
                        "echo '{\"order\": [\"mira\"]}' > /home/shared/draws/x.json")
    assert code != 0 and "Permission denied" in out, out
    assert box.run("git", "-C", BASELINE, "rev-parse", "HEAD").stdout == head


def test_an_adopted_change_reaches_the_baseline_only_through_the_broker(box: Container) -> None:
    box.run("runuser", "-u", "opus", "--", "sh", "-c",
            "cd /home/opus/code && echo '# evolved by opus' >> DEPLOY.md && "
            "git commit -qam 'a note from opus'")
    cid = str(tool(box, "opus", "code_announce", {"description": "a note",
                                                  "expected_outcome": "nothing breaks"})["id"])
    for peer in ("mira", "aria"):
        ran_tests(box, peer, cid)  # a report rests on the reporter's own run (issue 43)
        tool(box, peer, "code_report_outcome", {"change_id": cid, "outcome": "worked",
                                                "note": "tested"})
    # Verified, held by its author alone: the broker refuses to merge it, whoever asks.
    body = json.dumps({"change_id": cid})
    _, out = as_user(box, "opus", PYTHON, "-c", ASK, "/v1/experience/baseline/merge", body)
    assert out.startswith("409") and "adopted by 0 of opus's 2 peers" in out, out
    assert "# evolved by opus" not in box.run("tail", "-1", f"{BASELINE}/DEPLOY.md").stdout
    adopted = tool(box, "mira", "code_adopt", {"change_id": cid})
    assert adopted["status"] == "merged", adopted
    assert "# evolved by opus" in box.run("tail", "-1", f"{BASELINE}/DEPLOY.md").stdout
    owners = box.run("stat", "-c", "%U %a", f"{BASELINE}/DEPLOY.md",
                     f"/home/shared/merged/{cid}.json",
                     f"/home/shared/draws/{cid}.json").stdout.split("\n")
    assert owners[:3] == ["experience-broker 644"] * 3, owners  # the draw: the broker's
    # A second setup run (the upgrade path) keeps it and finds nothing unreviewed.
    again = box.run(SETUP, env=PIP_ENV).stdout
    assert "unreviewed" not in again
    assert "# evolved by opus" in box.run("tail", "-1", f"{BASELINE}/DEPLOY.md").stdout


def test_an_approved_run_is_nobody_in_the_brokers_sandbox(box: Container) -> None:
    """Break 3: an approved `run` ran unsandboxed as its executor, reading what that user
    reads (a peer's files, /etc/experience) into the shared record."""
    box.run("sh", "-c", "echo 'EMAIL_PASS=mira-canary-5d1c' >> /etc/experience/mira.env")
    command = ("id -u; cat /etc/experience/mira.env; ls /home/mira /var/lib/experience-broker;"
               " echo mira-canary-5d1c")
    pid = box.run("citizen", "consensus", "start", "--by", "opus", "Run a check").stdout \
        .split()[1].rstrip(":")
    prelude = ("import json; from citizen import civilization, config; "
               "c = civilization.consensus(config.templates()); ")

    def step(name: str, code: str) -> str:
        return box.run("runuser", "-u", name, "--", "env", f"PYTHONPATH=/home/{name}/code",
                       PYTHON, "-c", prelude + code).stdout

    roles = json.loads(step("opus", f"print(json.dumps(c.load('{pid}').roles))"))
    body = json.dumps(proposal(tool="run", content=command))
    step("opus", f"c.propose('{pid}', 'opus', json.loads({body!r}))")
    approve = f"json.loads({json.dumps(vote())!r})"
    step(roles["verifier"], f"c.verify('{pid}', '{roles['verifier']}', {approve})")
    step(roles["integrator"], f"c.integrate('{pid}', '{roles['integrator']}', {approve})")
    box.run("citizen", "proposal", "approve", pid, "--why", "looked at it")
    step("opus", f"c.execute('{pid}', 'opus')")
    record = box.run("cat", f"/home/shared/proposals/records/{pid}/execution.json").stdout
    output = json.loads(record)["results"][0]["output"]
    assert output.splitlines()[1:2] == ["65534"], record  # nobody: not opus, not the broker
    assert "mira-canary-5d1c" not in record and "No such file" in output, output
    # The run changed no file, so nothing was committed; the repository is the broker's.
    assert box.run("stat", "-c", "%U %a", "/home/shared/world/.git/HEAD").stdout.strip() \
        == "experience-broker 644"
