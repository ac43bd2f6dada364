"""The dashboard's read-only views through the broker (citizen.broker.views), with real
Unix users: on a server the broker's state is its user's alone (0700), so the web user
reads the refused reservations, the mail quarantine and the onboarding requests from the
broker - which serves them to root and the web user by SO_PEERCRED, and to no citizen.

A server-mode broker runs in this process (as root, with its state in a root-only 0700
directory, as the broker's is on a server); the callers are separate processes under
throwaway users: a web user (the release's WEB_USER name is pointed at it here, in this
process only - no caller can set it), a citizen (primary group `citizens`) and nobody.
The booted version of this is tests/test_hostile_*_server.py (not run here).
"""

from __future__ import annotations

import grp
import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from citizen.admin import founding, helper
from citizen.broker import mailstate, onboarding
from citizen.broker import service as _service  # noqa: F401 - every route, as `broker run`
from citizen.broker.ledger import CapExceeded, Caps, Ledger
from citizen.broker.listener import listen
from citizen.broker.server import Broker
from citizen.config import paths

SYSTEM_PYTHON = "/usr/bin/python3"  # the venv's interpreter may sit in root's home (0700)
SITE = Path(httpx2.__file__).parents[1]  # the venv's packages, readable by every user
MARK = "quarantined-sender-7c1e@example.org"  # what only the broker's state holds
VIEWS = "/v1/experience/views/"
NO_BROKER = "the broker does not answer (systemctl status experience-broker)"
CAPS = Caps(citizen_day=0.1, citizen_month=10, civilization_day=10, civilization_month=10)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or not Path(SYSTEM_PYTHON).is_file(),
    reason="real users need root, useradd and a python every user can run")


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@dataclass
class User:
    name: str
    uid: int
    gid: int
    groups: list[int]


@dataclass
class Server:
    """A civilization that is a server (its commons is group `citizens`), the broker's
    0700 state, and the socket's 0755 directory."""

    root: Path
    state: Path
    sock: Path
    web: User
    citizen: User
    nobody: User


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    made_group = subprocess.run(["getent", "group", "citizens"], capture_output=True,
                                check=False).returncode != 0
    if made_group:
        _sh("groupadd", "citizens")
    tag = uuid.uuid4().hex[:6]
    web, cit = f"xweb{tag}", f"xcit{tag}"
    # The web user as setup_server.sh makes it: a system user, not in `citizens`.
    _sh("useradd", "--system", "--user-group", "-M", "-s", "/usr/sbin/nologin", web)
    _sh("useradd", "-M", "-d", f"/nonexistent-{cit}", "-g", "citizens", "-s",
        "/usr/sbin/nologin", cit)
    # 0755 up to the root, as /home: the web user must reach the commons' group to know
    # it is on a server (the pytest tmp of root is 0700).
    top = Path(tempfile.mkdtemp(prefix="views-"))
    top.chmod(0o755)
    try:
        citizens = grp.getgrnam("citizens").gr_gid
        root, state, run = top / "civ", top / "state", top / "run"
        root.mkdir()
        state.mkdir(mode=0o700)  # the broker's alone (root's, here): the web user cannot
        run.mkdir(mode=0o755)
        monkeypatch.setenv("CIV_ROOT", str(root))
        monkeypatch.setenv(paths.BROKER_STATE_ENV, str(state))
        monkeypatch.setenv(paths.BROKER_SOCKET_ENV, str(run / "broker.sock"))
        founding.init(["opus", "mira"])
        os.chown(root / "shared", -1, citizens)  # this is what makes it a server
        for home in ("opus", "mira"):  # 0750 homes of group citizens, as a server's
            os.chown(root / home, -1, citizens)
        # The release's constant, pointed at the throwaway user in this process only.
        monkeypatch.setattr(helper, "WEB_USER", web)
        w, c = (subprocess.run(["id", "-u", n], capture_output=True, text=True,
                               check=True).stdout.strip() for n in (web, cit))
        yield Server(root, state, run / "broker.sock",
                     # SupplementaryGroups=citizens, as citizen-web.service gives it.
                     web=User(web, int(w), grp.getgrnam(web).gr_gid, [citizens]),
                     citizen=User(cit, int(c), citizens, []),
                     nobody=User("nobody", 65534, 65534, []))
    finally:
        shutil.rmtree(top)
        for n in (web, cit):
            subprocess.run(["userdel", n], capture_output=True, check=False)
        subprocess.run(["groupdel", web], capture_output=True, check=False)
        if made_group:
            subprocess.run(["groupdel", "citizens"], capture_output=True, check=False)


def _seed(ledger: Ledger, state: Path) -> None:
    """One refused reservation of opus, one quarantined mail, one pending request."""
    ledger.reserve("opus", "m", 0.05, CAPS)
    with pytest.raises(CapExceeded):
        ledger.reserve("opus", "m", 0.5, CAPS)
    mailstate.state(state).quarantine("opus", "<q@x>", MARK, "a stranger")
    with onboarding.held() as folder:
        (folder / "0001-nova.json").write_text(json.dumps(
            {"schema_version": 1, "id": "0001-nova", "name": "nova", "focus": "maps",
             "strengths": [], "why": "more hands", "author": "opus",
             "requested_at": "2025-01-01T00:00:00Z", "status": "pending"}))


@pytest.fixture
def broker(server: Server) -> Iterator[Broker]:
    """A server-mode broker on the socket, serving in a thread of this (root) process."""
    b = Broker(Ledger(server.state / "ledger.db"), server_mode=True)
    _seed(b.ledger, server.state)
    srv = listen(server.sock, b, server_mode=True)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield b
    finally:
        srv.shutdown()
        thread.join(10)
        srv.server_close()
        b.ledger.close()


def _as(user: User, server: Server, script: str, *args: str) -> Any:
    """`script` run by `user`'s own process (its uid is what SO_PEERCRED tells the
    broker); what it prints, as JSON."""
    done = subprocess.run(
        [SYSTEM_PYTHON, "-c", script, *args], user=user.uid, group=user.gid,
        extra_groups=user.groups, cwd="/", capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "CIV_ROOT": str(server.root),
             "PYTHONPATH": f"{paths.project_dir()}:{SITE}",
             paths.BROKER_STATE_ENV: str(server.state),
             paths.BROKER_SOCKET_ENV: str(server.sock)}, check=False)
    if done.returncode != 0:
        raise AssertionError(f"as {user.name}: {done.stderr[-1500:]}")
    return json.loads(done.stdout)


# A GET on the broker's socket, as the calling user, with the headers given.
GET = """
import json, sys, httpx2
transport = httpx2.HTTPTransport(uds=sys.argv[1])
with httpx2.Client(transport=transport, base_url="http://broker") as http:
    r = http.get(sys.argv[2], headers=json.loads(sys.argv[3]))
print(json.dumps({"status": r.status_code, "body": r.text}))
"""


def _get(user: User, server: Server, path: str, headers: dict[str, str] | None = None
         ) -> tuple[int, str]:
    got = _as(user, server, GET, str(server.sock), path, json.dumps(headers or {}))
    return got["status"], got["body"]


def test_the_web_user_reads_the_three_views_from_the_broker(
        server: Server, broker: Broker) -> None:
    status, body = _get(server.web, server, VIEWS + "refused?days=7")
    assert status == 200, body
    (row,) = json.loads(body)["series"]
    assert (row["citizen"], row["refused"], row["usd"]) == ("opus", 1, 0.5)
    status, body = _get(server.web, server, VIEWS + "quarantine")
    assert status == 200, body
    (q,) = json.loads(body)["rows"]
    assert (q["citizen"], q["from"], q["reason"]) == ("opus", MARK, "a stranger")
    status, body = _get(server.web, server, VIEWS + "onboarding")
    assert status == 200, body
    (r,) = json.loads(body)["requests"]
    assert (r["id"], r["author"]) == ("0001-nova", "opus")
    # The web user cannot read the state itself: the broker is the only way in.
    with pytest.raises(AssertionError, match="PermissionError"):
        _as(server.web, server, "import os, sys; os.listdir(sys.argv[1])", str(server.state))


@pytest.mark.parametrize("who", ["citizen", "nobody"])
@pytest.mark.parametrize("view", ["refused?days=7", "quarantine", "onboarding"])
def test_a_citizen_or_any_other_user_gets_403_and_nothing_else(
        server: Server, broker: Broker, who: str, view: str) -> None:
    """Whatever it says it is - no header, a citizen's name, the web user's name - the
    kernel's uid decides, and the refusal holds nothing of the state."""
    user = getattr(server, who)
    for headers in ({}, {"x-experience-citizen": "opus"},
                    {"x-experience-citizen": server.web.name}):
        status, body = _get(user, server, VIEWS + view, headers)
        assert status == 403, (headers, body)
        for leaked in (MARK, "nova", "opus", "0.5"):
            assert leaked not in body, (headers, body)


FACTS = """
import json
from citizen.web.facts import decisions, money
queue = decisions.waiting_for_a_person()
print(json.dumps({"refused": money.refused(), "quarantine": decisions.quarantine(),
                  "onboarding": [i for i in queue["items"] if i["kind"] == "onboarding"],
                  "unreadable": [u for u in queue["unreadable"]
                                 if u["source"] == "onboarding requests"]}))
"""


def test_the_dashboards_facts_on_a_server_come_from_the_broker(
        server: Server, broker: Broker) -> None:
    """The facts as the web user computes them (its own process, uid and groups): the
    rows the broker holds."""
    facts = _as(server.web, server, FACTS)
    assert facts["refused"]["unreadable"] is None
    assert [(r["citizen"], r["refused"]) for r in facts["refused"]["series"]] == [("opus", 1)]
    assert facts["quarantine"]["unreadable"] == []
    assert [q["from"] for q in facts["quarantine"]["rows"]] == [MARK]
    assert [i["id"] for i in facts["onboarding"]] == ["0001-nova"]
    assert facts["unreadable"] == []


def test_a_broker_that_does_not_answer_is_unreadable_never_nothing(server: Server) -> None:
    """No broker on the socket: each source says so (and what to run), and none of them
    shows as "no refusals" or "nothing waiting"."""
    ledger = Ledger(server.state / "ledger.db")
    _seed(ledger, server.state)
    ledger.close()
    facts = _as(server.web, server, FACTS)
    assert facts["refused"] == {"series": [], "truncated": False, "unreadable": NO_BROKER}
    assert facts["quarantine"]["unreadable"] == [{"source": "the mail quarantine",
                                                  "error": NO_BROKER}]
    assert facts["onboarding"] == []
    assert facts["unreadable"] == [{"source": "onboarding requests", "error": NO_BROKER}]


def test_who_may_view_is_root_the_web_user_and_in_dev_mode_the_brokers_own(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from citizen.broker import views
    from citizen.broker.refused import Refused

    for uid in (0, server.web.uid):
        for server_mode in (True, False):
            views.may_view(uid, server_mode=server_mode)
    monkeypatch.setattr(os, "geteuid", lambda: server.citizen.uid)  # a dev broker's user
    views.may_view(server.citizen.uid, server_mode=False)
    with pytest.raises(Refused) as refused:  # on a server its own uid is no dashboard
        views.may_view(server.citizen.uid, server_mode=True)
    assert refused.value.status == 403
    for uid in (server.nobody.uid, server.citizen.uid + 1):
        for server_mode in (True, False):
            with pytest.raises(Refused):
                views.may_view(uid, server_mode=server_mode)


def test_answers_are_bounded_and_bad_queries_refused(
        server: Server, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root asks (as `sudo citizen` would): days past a year are capped, a query that is
    not the view's is refused with the reason, and rows stop at MAX_ROWS (the newest)."""
    from citizen.access import client
    from citizen.broker import views

    assert client.view(VIEWS + "refused", {"days": 10**9})[0] == 200
    for query in ("refused?days=soon", "refused?citizen=opus", "quarantine?days=3"):
        status, answer = client.view(VIEWS + query)
        assert status == 400 and answer["error"]["type"] == "invalid_request_error", answer
    mailstate.state(server.state).quarantine("mira", "<q2@x>", "newer@example.org", "late")
    monkeypatch.setattr(views, "MAX_ROWS", 1)
    status, answer = client.view(VIEWS + "quarantine")
    assert status == 200 and answer["truncated"] is True
    assert [q["from"] for q in answer["rows"]] == ["newer@example.org"]
