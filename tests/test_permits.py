"""Wake permits (issue 43): the broker's queue - first come first served, at most
`max_working_wakes` held, one place a citizen, freed when its connection closes (a
killed holder's too) or its lease runs out - and, with real Unix users, a citizen
holding none is refused its model calls and cannot take one in another's name.

The queue alone (`Permits`), then a real dev-mode broker process (`client.ensure`) and
real holder processes; the real-user tests run a server-mode broker in this process
(tests/test_broker_views.py's fixtures: root, useradd). The daemons' side is
tests/test_permits_daemons.py; the booted server's, tests/test_hostile_server.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from citizen.access import permit
from citizen.access.permit import Cancel, Cancelled, Permit, PermitUnavailable
from citizen.broker import permits as queue
from citizen.broker.permits import Permits
from citizen.broker.refused import Refused
from citizen.broker.server import Broker
from citizen.config import paths
from citizen.errors import ConfigError
from tests.daemons import wait_for
from tests.test_broker_views import Server, _as, broker, server  # noqa: F401 - fixtures

HOLD = """
import sys, time
from citizen.access.permit import Permit
held = Permit(sys.argv[1]).wait()  # kept: a permit collected is a socket closed
print("granted", flush=True)
time.sleep(600)
"""


def fixed(limit: int, lease_s: float = 60.0) -> Permits:
    return Permits(lambda: (limit, lease_s))


def test_first_come_first_served_and_never_past_the_limit() -> None:
    p = fixed(2)
    a, b, c, d = (p.join(n) for n in ("a", "b", "c", "d"))
    assert [x.granted.is_set() for x in (a, b, c, d)] == [True, True, False, False]
    assert (p.ahead(c), p.ahead(d)) == (0, 1)
    p.leave(b)
    assert c.granted.is_set() and not d.granted.is_set() and p.ahead(d) == 0
    view = p.view()
    assert [h["citizen"] for h in view["holders"]] == ["a", "c"]
    assert [(w["citizen"], w["ahead"]) for w in view["waiting"]] == [("d", 0)]
    p.leave(a)
    p.leave(c)
    p.leave(d)
    assert p.idle()


def test_a_citizen_has_one_place_however_often_it_asks() -> None:
    """A second request shares the place it has - waiting or holding: ten requests of
    one citizen hold no ten places, and the permit goes when the last connection does."""
    p = fixed(1)
    held = p.join("a")
    waits = [p.join("b") for _ in range(5)]
    assert all(w is waits[0] for w in waits) and waits[0].users == 5
    assert len(p.view()["waiting"]) == 1
    again = p.join("a")
    assert again is held and held.users == 2
    p.leave(held)
    assert p.holds("a") and not waits[0].granted.is_set()  # one connection still open
    p.leave(again)
    assert waits[0].granted.is_set() and not p.holds("a")


def test_a_citizen_that_asks_again_queues_behind_the_others() -> None:
    """The hostile re-asker: giving its permit back and asking at once puts it last."""
    p = fixed(1)
    first = p.join("greedy")
    b = p.join("b")
    p.leave(first)
    again = p.join("greedy")
    assert b.granted.is_set() and not again.granted.is_set() and p.ahead(again) == 0
    c = p.join("c")
    assert p.ahead(c) == 1  # behind the re-asker, who asked before it


def test_a_lease_that_ran_out_holds_nothing_and_is_not_shared() -> None:
    p = fixed(1, lease_s=0.2)
    place = p.join("a")
    later = p.join("b")
    wait_for(lambda: not p.holds("a"), timeout=10)
    assert not later.granted.is_set()  # its connection's thread expires it (serve)
    p.expire(place)
    assert later.granted.is_set()
    again = p.join("a")  # a new place, at the back: the old one is gone
    assert again is not place and not again.granted.is_set()


def test_only_root_and_the_dev_user_call_the_model_without_a_permit() -> None:
    p = fixed(1)
    p.check("a", 0)  # root: the operator's `citizen ask`
    p.check("a", os.geteuid())  # a dev-mode broker's own user
    with pytest.raises(Refused) as refused:
        p.check("a", 4242)
    assert refused.value.status == 403 and "holds no wake permit" in str(refused.value)
    p.join("a")
    p.check("a", 4242)


@pytest.mark.parametrize(("settings", "key"), [
    ({"max_working_wakes": 0}, "max_working_wakes"),
    ({"max_working_wakes": "4"}, "max_working_wakes"),
    ({"max_working_wakes": True}, "max_working_wakes"),
    ({"wake_permit_lease_s": 0}, "wake_permit_lease_s"),
    ({"wake_permit_lease_s": "long"}, "wake_permit_lease_s")])
def test_the_operators_settings_are_checked(rules_dir: Path, settings: dict[str, object],
                                            key: str) -> None:
    assert queue.settings() == (os.cpu_count() or 1, queue.LEASE_S)  # none written
    (rules_dir / "broker.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError) as bad:
        queue.settings()
    assert str(rules_dir / "broker.json") in str(bad.value) and key in str(bad.value)
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 3,
                                                       "wake_permit_lease_s": 90}))
    assert queue.settings() == (3, 90.0)


# ---------------------------------------------------------------- a real broker

def holder(name: str) -> subprocess.Popen[str]:
    """A process holding `name`'s permit (once it printed "granted")."""
    return subprocess.Popen([sys.executable, "-c", HOLD, name], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(paths.project_dir())})


def granted(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None and proc.stdout.readline().strip() == "granted"


def test_a_killed_holder_frees_its_permit_to_the_next(civ: Path, rules_dir: Path) -> None:
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 1}))
    first = holder("opus")
    try:
        granted(first)
        said: list[int] = []
        got: list[Permit] = []
        waiter = threading.Thread(target=lambda: got.append(
            Permit("mira").wait(said=said.append)))
        waiter.start()
        wait_for(lambda: said == [0])  # mira waits, first in line
        listing = permit.listing()
        assert listing is not None and listing["limit"] == 1
        assert [h["citizen"] for h in listing["holders"]] == ["opus"]
        first.send_signal(signal.SIGKILL)  # no goodbye: the kernel closes its socket
        waiter.join(30)
        assert got, "mira was never granted the killed holder's permit"
        got[0].release()
        wait_for(lambda: (permit.listing() or {}).get("holders") == [])
    finally:
        first.kill()
        first.wait()


def test_a_holder_past_its_lease_loses_it(civ: Path, rules_dir: Path) -> None:
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 1,
                                                       "wake_permit_lease_s": 1}))
    lost: list[str] = []
    held = Permit("opus").wait()
    assert 0 < held.lease_s <= 1
    held.watch(lost.append)
    waited = Permit("mira").wait()  # granted once opus's lease ran out
    wait_for(lambda: lost, timeout=10)
    assert "lease of 1 s ran out" in lost[0]
    waited.release()
    held.release()


def test_a_cancelled_wait_ends_at_once_and_leaves_no_place(civ: Path, rules_dir: Path) -> None:
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": 1}))
    with Permit("opus").wait():
        cancel = Cancel()
        out: list[BaseException] = []

        def wait() -> None:
            try:
                Permit("mira").wait(cancel)
            except Cancelled as exc:
                out.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        wait_for(lambda: (permit.listing() or {}).get("waiting"))
        started = time.monotonic()
        cancel.set()
        thread.join(10)
        assert out and time.monotonic() - started < 5
        wait_for(lambda: (permit.listing() or {}).get("waiting") == [])


def test_a_broken_broker_json_is_said_to_the_asker(civ: Path, rules_dir: Path) -> None:
    (rules_dir / "broker.json").write_text(json.dumps({"max_working_wakes": -1}))
    with pytest.raises(PermitUnavailable) as refused:
        Permit("opus").wait()
    assert "(500)" in str(refused.value) and "max_working_wakes" in str(refused.value)


# ---------------------------------------------------------------- real users, server mode

# As the citizen's own process: its model call without a permit, a permit in opus's
# name, then its permit and the same call (argv: the citizen's name).
CALLS = """
import json, sys, httpx2
from citizen.access.permit import Permit, PermitUnavailable
from citizen.config import paths
def call():
    t = httpx2.HTTPTransport(uds=str(paths.broker_socket()))
    with httpx2.Client(transport=t, base_url="http://broker", timeout=30) as c:
        r = c.post("/v1/messages", json={"model": "claude-opus-4-6", "max_tokens": 5,
                   "messages": [{"role": "user", "content": "hi"}]})
    return [r.status_code, r.json()["error"]["message"] if r.status_code != 200 else ""]
out = {"without": call()}
try:
    Permit("opus").wait()
    out["as_opus"] = "granted"
except PermitUnavailable as exc:
    out["as_opus"] = str(exc)
with Permit(sys.argv[1]).wait():
    out["with"] = call()
print(json.dumps(out))
"""

# Holds its permit past the lease and calls after (argv: the citizen's name).
PAST_LEASE = """
import json, sys, threading, httpx2
from citizen.access.permit import Permit
from citizen.config import paths
lost = threading.Event()
why = []
p = Permit(sys.argv[1]).wait()
p.watch(lambda w: (why.append(w), lost.set()))
lost.wait(30)
t = httpx2.HTTPTransport(uds=str(paths.broker_socket()))
with httpx2.Client(transport=t, base_url="http://broker", timeout=30) as c:
    r = c.post("/v1/messages", json={"model": "claude-opus-4-6", "max_tokens": 5,
               "messages": [{"role": "user", "content": "hi"}]})
print(json.dumps({"lost": why, "status": r.status_code, "message": r.text[:400]}))
"""


def test_a_citizen_without_a_permit_is_refused_its_model_calls(
        server: Server, broker: Broker) -> None:  # noqa: F811 - the fixtures
    (server.root / server.citizen.name).mkdir()  # a citizen of this civilization
    out = _as(server.citizen, server, CALLS, server.citizen.name)
    status, message = out["without"]
    assert status == 403 and "holds no wake permit" in message, out
    assert "cannot call for opus" in out["as_opus"], out  # the kernel names the caller
    status, message = out["with"]
    assert "wake permit" not in message, out  # past the permit: on to its rules
    assert broker.permits.idle()  # its process ended: the permit went with it


def test_a_citizen_holding_past_its_lease_is_refused_after_it(
        server: Server, broker: Broker) -> None:  # noqa: F811 - the fixtures
    (server.root / server.citizen.name).mkdir()
    broker.permits = Permits(lambda: (1, 1.0))  # the operator's lease: one second
    out = _as(server.citizen, server, PAST_LEASE, server.citizen.name)
    assert out["lost"] and "lease of 1 s ran out" in out["lost"][0], out
    assert out["status"] == 403 and "holds no wake permit" in out["message"], out
