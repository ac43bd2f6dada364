"""Mail a citizen sends, against the real Dovecot and SMTP hub: only to operators and
citizens and rate-limited, no header injection, the operator's notices (80 % of the cap,
a peer in trouble). The fixtures and helpers are tests/test_mail.py's."""
from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from email import message_from_bytes, policy
from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.home.tasks import TaskQueue
from citizen.wake.flow import run_wake
from tests.mailserver import MailSystem, unavailable
from tests.scripts import Actor, call, provides
from tests.test_mail import OPERATOR, OPUS, folder, mail, mx, opus_mail  # noqa: F401

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")


def test_send_email_goes_only_to_operators_and_citizens_and_is_rate_limited(
        opus_mail: Path, mx: MailSystem) -> None:  # noqa: F811
    from citizen.home.contexts import ContextStore
    from citizen.home.memory import Memory
    from citizen.llm.base import estimate_tokens
    from citizen.tools import ToolFailure, core_tools
    from citizen.tools.base import ToolEnv

    cfg_path = opus_mail / "config.json"
    data = json.loads(cfg_path.read_text())
    data["mail"]["max_sends_per_hour"] = 2
    cfg_path.write_text(json.dumps(data))
    home, cfg = paths.home("opus"), config.load_citizen("opus")
    env = ToolEnv(home, cfg, config.load_secrets("opus"), TaskQueue(home.tasks),
                  Memory(home.memory),
                  ContextStore(home.contexts, cfg.context_limits, estimate_tokens).load_all())
    tools = core_tools(mail=True)
    assert tools["send_email"].run(env, {"to": OPERATOR, "subject": "status",
                                         "body": "All well."}) == "sent"
    assert tools["send_email"].run(env, {"to": "mira@experience.local", "subject": "hi",
                                         "body": "Hello, peer."}) == "sent"
    with pytest.raises(ToolFailure, match="limit of 2 messages per hour"):
        tools["send_email"].run(env, {"to": OPERATOR, "subject": "again", "body": "x"})
    with pytest.raises(ToolFailure, match="not an operator on the allow-list or a citizen"):
        tools["send_email"].run(env, {"to": "someone@else.example", "subject": "x", "body": "x"})
    (got,) = folder(mx, OPERATOR, "INBOX")
    assert got["Subject"] == "status" and got["From"] == OPUS
    assert len(folder(mx, "mira@experience.local", "INBOX")) == 1


def test_a_crlf_in_an_encoded_subject_is_no_header_injection(tmp_path: Path) -> None:
    """'=?utf-8?q?hi=0D=0ABcc:…?=' decodes to a line break: stored as it came, the reply
    would carry a Bcc of the sender's choosing (or raise ValueError and end the wake)."""
    from citizen.broker import mailbox
    from citizen.broker.mail import compose
    from citizen.home.tasks import Task
    from citizen.mail.message import parse
    from citizen.mail.outbox import reply_to_task

    raw = (b"From: boss@example.org\r\nTo: opus@experience.local\r\n"
           b"Subject: =?utf-8?q?hi=0D=0ABcc:_evil@example.net=09=00x?=\r\n"
           b"Message-ID: <crlf-1@example.org>\r\n\r\nPlease look.\r\n")
    parsed = parse(raw, 1 << 20)
    assert not any(ch in parsed.subject for ch in "\r\n\t\x00")
    assert parsed.subject == "hi Bcc: evil@example.net x"
    task = Task(id="t-1", text="x", meta={"from": parsed.sender, "subject": parsed.subject,
                                           "message_id": parsed.message_id})
    task.status, task.result = "done", "ok"
    request = reply_to_task(task)
    assert "\n" not in request["subject"]
    # The broker writes the message from the request (whatever else a request says).
    acct = mailbox.Account("opus@experience.local", "pw", mailbox.Endpoint("h", 1, "plain"),
                           mailbox.Endpoint("h", 1, "plain"), where="opus's .env")
    forged = {**request, "subject": "hi\r\nBcc: evil@example.net"}
    for req in (request, forged):
        reply = compose(acct, config.load_citizen("opus"), [parsed.sender], req)
        assert reply["Bcc"] is None and "\n" not in str(reply["Subject"])
        assert message_from_bytes(bytes(reply), policy=policy.default)["Bcc"] is None


def test_the_operator_is_mailed_once_when_a_citizen_passes_80_percent(
        opus_mail: Path, mx: MailSystem) -> None:  # noqa: F811
    """The daily cap's notice goes to the operators (mail.allowed_senders) by real mail,
    once a day, with the money spent and what to run."""
    from citizen.home import spend

    cfg = json.loads((opus_mail / "config.json").read_text())
    cfg["budget"] = {**cfg.get("budget", {}), "max_usd_per_day": 1.0}
    (opus_mail / "config.json").write_text(json.dumps(cfg))
    spend.record(paths.home("opus"), wake=0, purpose="earlier", tier="primary", model="m",
                 tokens_in=0, tokens_out=0, cache_read=0, cache_write=0, cost_usd=0.79)
    tasks = TaskQueue(paths.home("opus").tasks)
    for _ in range(2):  # the first wake crosses 80 %, the second must not mail again
        tasks.add("say hi")
        actor = Actor(replace(call("task_complete", summary="hi"), cost_usd=0.02))
        run_wake("opus", wake_type="TASK", provider=provides(actor))
    (notice,) = [m for m in folder(mx, OPERATOR, "INBOX")
                 if "near its daily budget" in str(m["Subject"])]
    body = notice.get_content()
    assert "of its $1.00 daily model budget" in body and "citizen cost" in body


def test_the_peer_monitor_mails_the_operators_about_a_peer_in_trouble(
        opus_mail: Path, mx: MailSystem) -> None:  # noqa: F811
    """Issue 19: the peer monitor's operator mail was never tested. aria's task is stuck;
    once opus has reported her OPERATOR_THRESHOLD times in a day, the operators (its
    allowed senders) get one mail naming her, sent through the real SMTP hub."""
    from citizen.wake.types.peer_monitor import OPERATOR_THRESHOLD
    from shared.atomic import write_json
    from tests.scripts import say

    write_json(paths.home("mira").heartbeat, {"pid": os.getpid(), "state": "sleeping",
                                              "updated": time.strftime(
                                                  "%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())})
    tasks = TaskQueue(paths.home("aria").tasks)
    task = tasks.claim(tasks.add("long").id)
    os.utime(paths.home("aria").tasks / "active" / f"{task.id}.json",
             (time.time() - 8 * 3600,) * 2)
    reports = paths.shared_dir() / "monitor" / "findings" / "aria"
    for _ in range(40):  # the peer is drawn at random; stop once aria was reported enough
        run_wake("opus", wake_type="PEER_MONITOR", provider=lambda c, s: Actor(say("seen")))
        if len(list(reports.glob("*.json"))) >= OPERATOR_THRESHOLD:
            break
    assert len(list(reports.glob("*.json"))) >= OPERATOR_THRESHOLD
    inbox = folder(mx, OPERATOR, "INBOX")
    about = [m for m in inbox if "aria needs attention" in str(m["Subject"])]
    assert len(about) == 1, [str(m["Subject"]) for m in inbox]
    assert about[0]["From"] == OPUS and "stuck" in about[0].get_content()
    assert "pw-opus" not in about[0].as_string()  # no secret in the mail
