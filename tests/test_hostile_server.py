"""A hostile citizen on a booted server, with real Unix users: the broker holds.

Each test performs an attack a citizen's own Unix user can make - its daemon included,
since the citizen may rewrite it - and names the break of issue 28 it closes. Every one
of them succeeded on the code before the broker: the key was in the daemon's credential
file, the caps and prices came from the citizen's `~/code/templates`, and the ledger was
a file in its home. Boots its own container (tests/nspawn.py); root and systemd-nspawn
needed, skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator

import pytest

from citizen.config import paths
from tests.anthropic_server import MessagesServer, text
from tests.broker_attack_tools import PERMIT
from tests.nspawn import PYTHON, Container, operator_budget, set_up_server, unavailable, until

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

# Made at run time: this file is in every citizen's code, so a literal key here would be
# found by the search for it.
KEY = f"sk-ant-hostile-{secrets.token_hex(12)}"
# What a daemon rewritten to call the broker itself runs (argv: citizen header, body,
# "no-permit" to skip asking for a wake permit first).
DIRECT = """
import json, sys, httpx2
CLAIM = sys.argv[1]
if sys.argv[3:] != ["no-permit"]:  # a wake's calls run under its daemon's wake permit
    exec(PERMIT)
t = httpx2.HTTPTransport(uds="/run/experience-broker/broker.sock")
headers = {"x-api-key": "sk-mine", "anthropic-version": "2023-06-01"}
if sys.argv[1]:
    headers["x-experience-citizen"] = sys.argv[1]
with httpx2.Client(transport=t, base_url="http://broker", timeout=60) as c:
    r = c.post("/v1/messages", json=json.loads(sys.argv[2]), headers=headers)
print(r.status_code, r.text[:300])
""".replace("exec(PERMIT)", "exec(" + repr(PERMIT) + ")")



@pytest.fixture(scope="module")
def box(messages_api_module: MessagesServer) -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-hostile") as (box, _):
        for name in ("opus", "mira", "aria"):
            box.run("sh", "-c", f"printf 'ANTHROPIC_API_KEY={KEY}\\nANTHROPIC_BASE_URL="
                    f"{messages_api_module.url}\\n' > /etc/experience/{name}.env")
        # Room for the daemons' wakes beside the calls each test makes by hand (two CPUs
        # here: two permits by default); the permit tests set their own.
        box.run("sh", "-c", f"echo '{json.dumps(ROOMY)}' > /etc/experience/broker.json")
        box.run("systemctl", "start", "citizens.target")
        yield box


@pytest.fixture(scope="module")
def messages_api_module() -> Iterator[MessagesServer]:
    server = MessagesServer().start()
    server.api_key = KEY  # the broker must send the operator's key, which only it reads
    yield server
    server.stop()


@pytest.fixture
def api(messages_api_module: MessagesServer) -> MessagesServer:
    messages_api_module.queue.clear()
    messages_api_module.requests.clear()
    messages_api_module.headers.clear()
    messages_api_module.responder = None
    return messages_api_module


def as_user(box: Container, user: str, *cmd: str, check: bool = False,
            stdin: str | None = None) -> str:
    """Run as `user` through systemd, outside any unit's sandbox - what its daemon,
    rewritten, could do."""
    done = box.run("systemd-run", "--wait", "--pipe", "--quiet", "-p", f"User={user}", *cmd,
                   check=check, input=stdin)
    return done.stdout + done.stderr


ROOMY = {"max_working_wakes": 8}


def direct(box: Container, user: str, body: dict[str, object], claim: str = "",
           permit: bool = True) -> str:
    """A model call as `user` (claiming `claim`), under a wake permit unless not `permit`."""
    return as_user(box, user, PYTHON, "-c", DIRECT, claim, json.dumps(body),
                   *(() if permit else ("no-permit",)))


def call(model: str = "claude-opus-4-6", max_tokens: int = 50) -> dict[str, object]:
    return {"model": model, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hi"}]}




def test_no_process_of_a_citizen_can_read_the_model_key(box: Container) -> None:
    """The daemon holds the API key (its credential file, its memory)."""
    until(lambda: "sleeping" in box.run("systemctl", "show", "-p", "StatusText", "--value",
                                        "citizen@opus").stdout)
    pids = box.run("pgrep", "-u", "opus,mira,aria").stdout.split()
    assert pids
    for pid in pids:
        environ = box.run("cat", f"/proc/{pid}/environ", check=False).stdout
        assert KEY not in environ
    creds = box.run("sh", "-c", "cat /run/credentials/citizen@*/secrets", check=False).stdout
    assert KEY not in creds  # the daemon's credential holds the mailbox only
    for user in ("opus", "mira"):
        # The key comes on stdin: on the command line it would be in systemd-run's own
        # transient unit file, which the search would then find.
        found = as_user(box, user, "grep", "-rslF", "-f", "-", "/etc", "/home", "/opt",
                        "/run", "/var", "/tmp", stdin=KEY + "\n")
        assert KEY not in found and found.strip() == "", found
        assert "Permission denied" in as_user(box, user, "cat", f"/etc/experience/{user}.env")


def test_the_key_goes_upstream_only_from_the_broker(box: Container, api: MessagesServer) -> None:
    api.reply(text("ok"))
    out = direct(box, "opus", call())
    assert out.startswith("200"), out
    assert api.headers[-1]["x-api-key"] == KEY  # the broker's, never the caller's sk-mine


def test_identity_comes_from_the_kernel_not_the_caller(
        box: Container, api: MessagesServer) -> None:
    """A caller naming another citizen, or a user that is no citizen, gets nothing."""
    assert direct(box, "opus", call(), claim="mira").startswith("403")
    assert direct(box, "nobody", call(), claim="opus").startswith("403")
    assert direct(box, "experience", call(), claim="opus").startswith("403")  # baseline owner
    assert api.forwarded() == []


def test_a_rewritten_daemon_spends_nothing_past_the_operators_cap(
        box: Container, api: MessagesServer) -> None:
    """Caps and prices came from ~/code/templates, which the citizen writes."""
    operator_budget(box, "mira", max_usd_per_day=0.01)
    rewrite = ("import json, pathlib; t = pathlib.Path('/home/mira/code/templates'); "
               "c = json.loads((t / 'citizen_configs.json').read_text()); "
               "c['defaults']['budget'].update(max_usd_per_day=10000, max_usd_per_month=99999); "
               "(t / 'citizen_configs.json').write_text(json.dumps(c)); "
               "m = json.loads((t / 'models.json').read_text()); "
               "m['prices_usd_per_mtok'] = {k: dict(input=0, output=0, cache_write=0, "
               "cache_read=0) for k in m['prices_usd_per_mtok']}; "
               "(t / 'models.json').write_text(json.dumps(m))")
    as_user(box, "mira", PYTHON, "-c", rewrite, check=True)
    box.run("systemctl", "restart", "citizen@mira")
    model = _model(box, "mira")
    refused = [direct(box, "mira", call(model=model, max_tokens=4000)) for _ in range(3)]
    assert all(r.startswith("402") for r in refused), refused
    assert api.forwarded() == []  # not one call went out
    operator_budget(box, "mira", max_usd_per_day=10)
    api.reply(text("priced", input_tokens=1000, output_tokens=100))
    assert direct(box, "mira", call(model=model)).startswith("200")
    spent = json.loads(box.run("citizen", "spend", "--json").stdout)
    mine = [row for row in spent if row["citizen"] == "mira"]
    assert mine and mine[0]["usd"] > 0  # the release's prices, not the citizen's zeros


def test_a_killed_broker_loses_no_reservation(box: Container, api: MessagesServer) -> None:
    api.reply(text("slow"), delay_s=30)
    before = len(api.forwarded())
    worker = threading.Thread(target=direct, args=(box, "aria", call(
        model=_model(box, "aria"))))
    worker.start()
    until(lambda: len(api.forwarded()) > before)
    pid = box.run("systemctl", "show", "-p", "MainPID", "--value", "experience-broker").stdout
    box.run("kill", "-9", pid.strip())
    worker.join(60)
    until(lambda: box.run("systemctl", "show", "-p", "MainPID", "--value",
                          "experience-broker").stdout.strip() not in ("0", pid.strip())
          and box.run("test", "-S", "/run/experience-broker/broker.sock",
                      check=False).returncode == 0)
    until(lambda: any(r["citizen"] == "aria" for r in json.loads(
        box.run("citizen", "spend", "--json").stdout)))
    aria = [r for r in json.loads(box.run("citizen", "spend", "--json").stdout)
            if r["citizen"] == "aria"]
    assert aria[0]["usd"] > 0 and aria[0]["calls"] == 1  # counted at its worst case


def test_one_citizens_flood_does_not_starve_another(box: Container, api: MessagesServer) -> None:
    operator_budget(box, "opus", max_concurrent_calls=2, max_calls_per_minute=600)
    for _ in range(2):
        api.reply(text("slow"), delay_s=5)
    flood = ("import json, sys, threading, httpx2\n"
             f"CLAIM = ''\nexec({PERMIT!r})\n"  # one permit for the process: its calls share it
             "out = []\n"
             "def one():\n"
             "    t = httpx2.HTTPTransport(uds='/run/experience-broker/broker.sock')\n"
             "    with httpx2.Client(transport=t, base_url='http://broker', timeout=60) as c:\n"
             "        r = c.post('/v1/messages', json=json.loads(sys.argv[1]))\n"
             "        out.append(r.status_code)\n"
             "ts = [threading.Thread(target=one) for _ in range(12)]\n"
             "[x.start() for x in ts]; [x.join() for x in ts]\n"
             "print(sorted(out))\n")
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(
        as_user(box, "opus", PYTHON, "-c", flood, json.dumps(call()))))
    worker.start()
    until(lambda: len(api.forwarded()) >= 2)
    api.reply(text("mira's"))
    assert direct(box, "mira", call(model=_model(box, "mira"))).startswith("200")
    worker.join(60)
    assert result and result[0].strip() == str([200, 200] + [429] * 10), result


def _model(box: Container, name: str) -> str:
    data = json.loads(box.run("cat", "/opt/experience/release/templates/citizen_configs.json"
                              ).stdout)
    seats = data["citizens"].get(name, {}).get("council") or data["defaults"]["council"]
    return str(seats[0]["model"])


def test_a_citizen_without_the_network_permission_has_none(
        box: Container, api: MessagesServer) -> None:
    """Item 3: `can_use_network` was kept only by the daemon's own sandbox, which a
    citizen may rewrite. Now its unit has a private network namespace: the daemon - and
    anything it runs, rewritten or not - sees only loopback (the model and mail come
    through the broker's socket)."""
    until(lambda: "sleeping" in box.run("systemctl", "show", "-p", "StatusText", "--value",
                                        "citizen@opus").stdout)
    pid = box.run("systemctl", "show", "-p", "MainPID", "--value", "citizen@opus").stdout
    interfaces = [line.split(":")[0].strip() for line in
                  box.run("cat", f"/proc/{pid.strip()}/net/dev").stdout.splitlines()[2:]]
    assert interfaces == ["lo"]
    port = api.url.rsplit(":", 1)[1].strip("/")
    uid = box.run("id", "-u", "opus").stdout.strip()
    reach = box.run("nsenter", "-t", pid.strip(), "-n", "-S", uid, PYTHON, "-c",
                    f"import socket; socket.create_connection(('127.0.0.1', {port}), 3)",
                    check=False)
    said = reach.stderr.lower()  # nothing on that port, or no route at all: never reached
    assert reach.returncode != 0 and ("unreachable" in said or "refused" in said), said


# Holds a wake permit until the broker ends it, then calls (argv: the call's body): how
# long it held, what the broker said, and the call's answer.
PAST_LEASE = """
import json, sys, time, httpx2
CLAIM = ""
exec(PERMIT)
started, said = time.monotonic(), got.split(b'"granted"', 1)[1]
while chunk := held.recv(4096):
    said += chunk
held_s = time.monotonic() - started
t = httpx2.HTTPTransport(uds="/run/experience-broker/broker.sock")
with httpx2.Client(transport=t, base_url="http://broker", timeout=60) as c:
    r = c.post("/v1/messages", json=json.loads(sys.argv[1]))
print(json.dumps({"held_s": held_s, "said": said.decode(errors="replace"),
                  "status": r.status_code, "message": r.text[:300]}))
""".replace("exec(PERMIT)", "exec(" + repr(PERMIT) + ")")


def test_a_citizen_without_a_wake_permit_gets_no_model_call(
        box: Container, api: MessagesServer) -> None:
    """Issue 43: the bound on working wakes is the broker's - a daemon rewritten to skip
    the queue calls the broker itself, and is refused before anything is forwarded."""
    api.reply(text("never sent"))
    refused = direct(box, "opus", call(model=_model(box, "opus")), permit=False)
    assert refused.startswith("403") and "holds no wake permit" in refused, refused
    assert api.forwarded() == []
    assert direct(box, "opus", call(model=_model(box, "opus"))).startswith("200")


def test_a_permit_held_past_its_lease_is_taken_back(box: Container, api: MessagesServer) -> None:
    """A citizen that keeps its permit's connection open past the operator's lease loses
    the permit: the broker says so, closes the connection and refuses its calls."""
    box.run("sh", "-c", "echo '{\"max_working_wakes\": 8, \"wake_permit_lease_s\": 3}' "
            "> /etc/experience/broker.json")
    try:
        out = as_user(box, "mira", PYTHON, "-c", PAST_LEASE,
                      json.dumps(call(model=_model(box, "mira"))))
    finally:
        box.run("sh", "-c", f"echo '{json.dumps(ROOMY)}' > /etc/experience/broker.json")
    result = json.loads(out.strip().splitlines()[-1])
    assert 2.5 <= result["held_s"] < 60, result
    assert "lease of 3 s ran out" in result["said"], result
    assert result["status"] == 403 and "holds no wake permit" in result["message"], result
    assert api.forwarded() == []
