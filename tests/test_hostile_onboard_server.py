"""Citizens asking for citizens, and disk budgets, on a booted server with real users.

opus (the operator's rules grant it permissions.can_onboard_citizens) asks for nova
with its tool; the broker knows opus from the kernel and records the request; root
approves it, and nova's daemon starts and wakes on its own (idle wakes need no model).
mira, without the permission, is refused even after writing it into its own
config.json and calling the broker itself. Then root's disk check stops nova's unit
past the budget the operator set. Boots its own container (tests/nspawn.py); root and
systemd-nspawn needed, skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.nspawn import PYTHON, Container, set_up_server, unavailable, until

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

# What a daemon rewritten to call the broker itself runs (argv: the JSON body).
ASK = """
import sys, httpx2
t = httpx2.HTTPTransport(uds="/run/experience-broker/broker.sock")
with httpx2.Client(transport=t, base_url="http://broker", timeout=60) as c:
    r = c.post("/v1/experience/citizens/request", content=sys.argv[1],
               headers={"content-type": "application/json"})
print(r.status_code, r.text[:300])
"""



@pytest.fixture(scope="module")
def box() -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-onboard") as (box, _):
        box.run("systemctl", "start", "citizens.target")
        yield box


def as_user(box: Container, user: str, *cmd: str) -> str:
    """Run as `user` through systemd, outside any unit's sandbox - what its daemon,
    rewritten, could do."""
    done = box.run("systemd-run", "--wait", "--pipe", "--quiet", "-p", f"User={user}", *cmd,
                   check=False)
    return done.stdout + done.stderr


def request(name: str, why: str = "nobody tests our tools") -> str:
    return json.dumps({"name": name, "focus": "Testing", "strengths": ["tests"], "why": why})


def test_a_citizen_without_the_permission_is_refused_whatever_its_home_says(
        box: Container) -> None:
    """mira grants itself the permission in its own config.json and calls the broker."""
    as_user(box, "mira", PYTHON, "-c", "import json, pathlib; p = pathlib.Path("
            "'/home/mira/config.json'); d = json.loads(p.read_text()); d['permissions'] = "
            "{'can_onboard_citizens': True}; p.write_text(json.dumps(d))")
    out = as_user(box, "mira", PYTHON, "-c", ASK, request("vega"))
    assert out.startswith("403") and "can_onboard_citizens" in out, out
    out = as_user(box, "mira", PYTHON, "-c", ASK, request("daemon"))
    assert out.startswith("403"), out  # the permission first: nothing about names leaks
    assert "no citizen has asked" in box.run("citizen", "onboard", "--list").stdout
    assert box.run("id", "vega", check=False).returncode != 0


def test_a_permitted_citizen_asks_root_approves_and_the_newcomer_wakes(
        box: Container) -> None:
    for name in ("root", "experience-broker", "mira"):
        out = as_user(box, "opus", PYTHON, "-c", ASK, request(name))
        assert out.startswith("409"), out
    asked = as_user(box, "opus", "/usr/local/bin/citizen", "tool", "opus", "citizen_request",
                    json.dumps({"name": "nova", "focus": "Testing", "strengths": "tests",
                                "why": "$(touch /tmp/owned) <b>we need a tester</b>"}))
    assert "request 0001-nova for nova recorded" in asked, asked
    listed = box.run("citizen", "onboard", "--list").stdout
    assert "0001-nova" in listed and "by opus" in listed
    assert box.run("id", "nova", check=False).returncode != 0  # nothing before root says
    approved = box.run("citizen", "onboard", "--approve", "0001-nova").stdout
    assert "created user nova" in approved and "asked for by opus" in approved
    identity = box.run("cat", "/home/nova/contexts/identity.json").stdout
    assert "opus, a citizen of Experience, asked for me" in identity
    assert "$(touch /tmp/owned) <b>we need a tester</b>" in json.loads(identity)[
        "entries"][0]["text"]
    assert box.run("test", "-e", "/tmp/owned", check=False).returncode != 0
    box.run("systemctl", "start", "citizen@nova")
    until(lambda: "wake 1 " in box.run("citizen", "logs", "nova", "--wake", "1",
                                       check=False).stdout)  # it woke on its own
    until(lambda: "citizen:nova sleeping" in box.run(
        "systemctl", "show", "-p", "StatusText", "--value", "citizen@nova").stdout)
    assert box.run("stat", "-c", "%U", "/home/nova").stdout.strip() == "nova"


def test_root_stops_a_citizen_past_its_disk_budget(box: Container) -> None:
    assert "enabled" in box.run("systemctl", "is-enabled", "experience-disk.timer").stdout
    path = "/etc/experience/nova.json"
    rules = json.loads(box.run("cat", path).stdout)
    rules["budget"] = {"max_home_mb": 1}  # its clone of the code alone is more
    box.run("sh", "-c", f"cat > {path}", input=json.dumps(rules))
    assert box.run("systemctl", "is-active", "citizen@nova", check=False).stdout.strip() \
        == "active"
    box.run("systemctl", "start", "experience-disk.service")  # what the timer runs
    until(lambda: box.run("systemctl", "is-active", "citizen@nova",
                          check=False).stdout.strip() == "inactive", timeout=300)
    status = box.run("citizen", "status").stdout
    nova = "\n".join(ln for ln in status.splitlines() if ln.startswith("nova"))  # row, note
    assert "DISK BUDGET" in nova and "unit stopped" in nova, status
    assert "systemctl start citizen@nova" in box.run(
        "journalctl", "-u", "experience-disk", "--no-pager").stdout
    opus = box.run("systemctl", "is-active", "citizen@opus", check=False).stdout.strip()
    assert opus == "active"  # within its budget: untouched
