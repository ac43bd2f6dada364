"""Citizens ask for citizens, with the operator's permission; root decides (dev mode).

The request goes through the dev-mode broker (a child under CIV_ROOT/.broker), which
checks the permission, the name, the operator's cap and the author's rate, and records
it; `citizen onboard --approve|--reject` decides. Each attack is sent raw, as a daemon
rewritten to call the broker itself would send it - the tool's own permission check is
the citizen's code and proves nothing. The same on a booted server with real Unix users:
tests/test_hostile_onboard_server.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from citizen.access import client
from citizen.broker import onboarding
from citizen.cli import cli
from citizen.config import paths

pytestmark = pytest.mark.usefixtures("civ")
REQUEST = "/v1/experience/citizens/request"


@pytest.fixture(autouse=True)
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's directory (broker.json), before the broker starts and reads it."""
    folder = tmp_path / "etc"
    folder.mkdir()
    monkeypatch.setenv("EXPERIENCE_OPERATOR_DIR", str(folder))
    return folder


def rules(operator: Path, **settings: int) -> None:
    (operator / "broker.json").write_text(json.dumps(settings))


def ask(author: str, name: str, focus: str = "Testing", why: str = "we need a tester",
        strengths: Any = ("tests", "audits")) -> tuple[int, Any]:
    """What a daemon rewritten to call the broker itself sends."""
    return client.request(author, "POST", REQUEST, {"name": name, "focus": focus,
                                                     "strengths": list(strengths),
                                                     "why": why})


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def recorded() -> list[dict[str, Any]]:
    return onboarding.all_requests()


def message(answer: Any) -> str:
    return str(answer["error"]["message"])


def test_a_permitted_citizen_asks_through_its_tool_and_the_operator_sees_who_asked() -> None:
    out = invoke("tool", "opus", "citizen_request", json.dumps(
        {"name": "nova", "focus": "Testing", "strengths": "tests, audits",
         "why": "nobody tests our tools"}))
    assert "request 0001-nova for nova recorded" in out
    (listed,) = json.loads(invoke("onboard", "--list", "--json"))
    assert (listed["author"], listed["status"], listed["strengths"]) == \
        ("opus", "pending", ["tests", "audits"])
    assert "by opus" in invoke("onboard", "--list")
    assert not (Path(paths.civ_root()) / "nova").exists()  # nothing until root says


def test_a_citizen_without_the_permission_is_refused_by_the_broker_itself() -> None:
    status, answer = ask("mira", "nova")  # the tool would not even be offered to mira
    assert status == 403
    assert "permissions.can_onboard_citizens" in message(answer)
    assert recorded() == []
    refused = CliRunner().invoke(cli, ["tool", "mira", "citizen_request", json.dumps(
        {"name": "nova", "focus": "x", "strengths": "", "why": "y"})])
    assert "needs the permission can_onboard_citizens" in refused.output


@pytest.mark.parametrize(("name", "status"), [
    ("root", 409), ("daemon", 409),  # existing Unix users
    ("nobody", 409), ("systemd-evil", 409), ("experience-broker", 409),  # the system's
    ("../x", 400), ("Opus", 400), ("a" * 32, 400), ("", 400), ("x y", 400),
    ("opus", 409),  # an existing citizen
    ("shared", 409),  # the commons' directory
    ("aria2", None),  # control: a free name is accepted
])
def test_a_name_that_is_taken_or_invalid_creates_nothing(
        name: str, status: int | None, civ: Path) -> None:
    got, answer = ask("opus", name)
    if status is None:
        assert got == 201, answer
        return
    assert got == status, answer
    assert "choose another name" in message(answer) or "not a valid" in message(answer)
    assert recorded() == []
    assert sorted(p.name for p in civ.iterdir() if not p.name.startswith(".")) == \
        ["aria", "mira", "opus", "shared"]


def test_what_is_not_plain_text_is_refused() -> None:
    for field, value in (("focus", "Testing\x1b]0;owned\x07"), ("focus", "a\u202eb"),
                         ("why", "x" * 5000), ("focus", "")):
        payload = {"name": "nova", "focus": "Testing", "strengths": [], "why": "w",
                   field: value}
        status, answer = client.request("opus", "POST", REQUEST, payload)
        assert status == 400, (field, answer)
        assert field in message(answer)
    status, answer = client.request("opus", "POST", REQUEST,
                                    {"name": "nova", "focus": "x", "why": "w", "uid": 0})
    assert status == 400
    assert recorded() == []


def test_a_focus_holding_shell_and_markup_stays_text(civ: Path, tmp_path: Path) -> None:
    focus = f"$(touch {tmp_path}/a) `touch {tmp_path}/b` <script>alert(1)</script> ${{name}}"
    why = f"; touch {tmp_path}/c && echo ${{creator}} </textarea><img src=x onerror=alert(1)>"
    assert ask("opus", "nova", focus=focus, why=why)[0] == 201
    invoke("onboard", "--list")
    invoke("onboard", "--approve", "nova")
    own = json.loads((civ / "nova" / "config.json").read_text())
    assert own["focus"] == focus
    identity = (civ / "nova" / "contexts" / "identity.json").read_text()
    text = json.loads(identity)["entries"][0]["text"]
    assert focus in text and why in text  # verbatim: substituted once, as text
    assert [p.name for p in tmp_path.iterdir() if p.name in ("a", "b", "c")] == []


def test_the_operators_cap_holds_and_counts_waiting_requests(operator: Path) -> None:
    rules(operator, max_citizens=4, onboard_requests_per_day=10)
    assert ask("opus", "nova")[0] == 201  # 3 citizens + 1 waiting = 4
    status, answer = ask("opus", "vega")
    assert status == 403
    assert "cap of 4 citizens" in message(answer) and "max_citizens" in message(answer)
    invoke("onboard", "--reject", "0001-nova", "--why", "not now")
    assert ask("opus", "vega")[0] == 201  # a rejected request frees its place
    invoke("onboard", "--approve", "0002-vega")
    assert ask("opus", "lyra")[0] == 403  # now four citizens


def test_the_authors_rate_holds_against_a_flood(operator: Path) -> None:
    rules(operator, max_citizens=100, onboard_requests_per_day=2)
    answers: list[tuple[int, Any]] = []
    threads = [threading.Thread(target=lambda n=n: answers.append(ask("opus", f"n{n}")))
               for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s for s, _ in answers) == [201, 201] + [429] * 6
    assert "onboard_requests_per_day" in message(next(a for s, a in answers if s == 429))
    assert len(recorded()) == 2


def test_an_approved_request_becomes_a_citizen_naming_its_creator(civ: Path) -> None:
    assert ask("opus", "nova", why="nobody tests our tools")[0] == 201
    out = invoke("onboard", "--approve", "0001-nova")
    assert "citizen nova created, asked for by opus" in out
    identity = json.loads((civ / "nova" / "contexts" / "identity.json").read_text())
    text = identity["entries"][0]["text"]
    assert "I am nova" in text and "opus, a citizen of Experience, asked for me" in text
    assert "nobody tests our tools" in text and "I may hold out" in text
    assert json.loads((civ / "nova" / "config.json").read_text())["strengths"] == \
        ["tests", "audits"]
    (done,) = recorded()
    assert done["status"] == "approved" and done["decided_at"]
    again = CliRunner().invoke(cli, ["onboard", "--approve", "0001-nova"])
    assert again.exit_code == 1 and "already approved" in again.output
    assert ask("opus", "nova")[0] == 409  # its name is taken now
    status, mine = client.request("opus", "GET", "/v1/experience/citizens/requests")
    assert status == 200 and mine["requests"][0]["status"] == "approved"
    assert client.request("mira", "GET", "/v1/experience/citizens/requests")[1] == \
        {"requests": []}  # one's requests are not another's to read


def test_a_rejected_request_tells_its_author_why() -> None:
    assert ask("opus", "nova")[0] == 201
    bare = CliRunner().invoke(cli, ["onboard", "--reject", "nova"])
    assert bare.exit_code == 2 and "--why" in bare.output
    invoke("onboard", "--reject", "nova", "--why", "one tester is enough")
    status, mine = client.request("opus", "GET", "/v1/experience/citizens/requests")
    assert status == 200 and mine["requests"][0]["decision_why"] == "one tester is enough"
    assert not (paths.civ_root() / "nova").exists()
    assert "no request vega" in CliRunner().invoke(cli, ["onboard", "--approve",
                                                         "vega"]).output
