"""Mail against a real Dovecot and SMTP hub on loopback: round trip, bad input, faults."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from imapclient import IMAPClient

from citizen import config
from citizen.cli import cli
from citizen.config import paths
from citizen.daemon.process import Daemon
from citizen.home.tasks import TaskQueue
from citizen.mail import MailError
from citizen.mail.intake import Intake
from citizen.wake.flow import run_wake
from tests.daemons import wait_for
from tests.mailserver import USERS, MailSystem, new_mail_system, unavailable
from tests.scripts import Actor, call

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

OPUS = "opus@experience.local"
OPERATOR = "operator@example.org"


@pytest.fixture
def mx() -> Iterator[MailSystem]:
    system = new_mail_system()
    yield system
    system.stop()
    shutil.rmtree(system.dir, ignore_errors=True)


@pytest.fixture
def opus_mail(civ: Path, mx: MailSystem) -> Path:
    """opus with a mailbox, taking tasks from the operator."""
    home = civ / "opus"
    with (home / ".env").open("a") as fh:
        fh.write(mx.env(OPUS))
    cfg = json.loads((home / "config.json").read_text())
    cfg["mail"] = {"allowed_senders": [OPERATOR]}
    (home / "config.json").write_text(json.dumps(cfg))
    return home


def intake(timeout: float = 30.0) -> Intake:
    """opus's intake, through the dev-mode broker (which alone logs in)."""
    return Intake(paths.home("opus"), config.load_citizen("opus"), {}, timeout_s=timeout)


def mail(subject: str, body: str = "Please write notes/hi.md", sender: str = OPERATOR,
         **headers: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = sender, OPUS, subject
    msg["Message-ID"] = make_msgid(domain="example.org")
    for k, v in headers.items():
        msg[k.replace("_", "-")] = v
    msg.set_content(body)
    return msg


def folder(mx: MailSystem, user: str, name: str) -> list[Any]:
    """The messages in one of `user`'s folders, as an operator's mail client sees them."""
    with IMAPClient("127.0.0.1", port=mx.imap_port, ssl=False) as client:
        client.login(user, USERS[user])
        if not client.folder_exists(name):
            return []
        client.select_folder(name)
        fetched = client.fetch(client.search("ALL"), ["BODY.PEEK[]"])
        return [message_from_bytes(v[b"BODY[]"], policy=policy.default)
                for v in fetched.values()]


def test_round_trip_operator_mail_to_threaded_reply(opus_mail: Path, mx: MailSystem) -> None:
    original = mail("Write a greeting")
    mx.send(original, OPERATOR, OPUS)
    (outcome,) = intake().poll()
    assert outcome.action == "task"
    tasks = TaskQueue(paths.home("opus").tasks)
    task = tasks.load("queue", outcome.detail)
    assert task.source == "mail" and task.meta["message_id"] == original["Message-ID"]
    assert "Please write notes/hi.md" in task.text
    assert list((paths.home("opus").doorbell).glob("*.json"))  # the daemon is rung
    actor = Actor(call("write_file", path="notes/hi.md", content="Hello"),
                  call("task_complete", summary="Hello written to notes/hi.md"))
    result = run_wake("opus", wake_type="TASK", provider=lambda c, s: actor)
    assert result.status == "ok"
    (reply,) = folder(mx, OPERATOR, "INBOX")
    assert "notes/hi.md: 5 bytes, sha256" in reply.get_content()  # the reply quotes evidence
    assert reply["In-Reply-To"] == original["Message-ID"]
    assert original["Message-ID"] in reply["References"]
    assert reply["Subject"] == "Re: Write a greeting"
    assert "Hello written to notes/hi.md" in reply.get_content()
    assert folder(mx, OPUS, "INBOX") == [] and len(folder(mx, OPUS, "Processed")) == 1
    assert not intake().poll()  # nothing twice


def test_subject_routing_picks_the_task_kind(opus_mail: Path, mx: MailSystem) -> None:
    mx.send(mail("[code] tidy the loop"), OPERATOR, OPUS)
    (outcome,) = intake().poll()
    assert TaskQueue(paths.home("opus").tasks).load("queue", outcome.detail).kind == "CODE"


def _raw(head: bytes, body: bytes) -> bytes:
    return head.replace(b"\n", b"\r\n") + b"\r\n" + body.replace(b"\n", b"\r\n")


BAD = {
    "unknown sender": (mail("hi", sender="stranger@evil.example").as_bytes(),
                       "unknown sender stranger@evil.example"),
    "malformed MIME": (_raw(b"From: operator@example.org\nTo: opus@experience.local\n"
                            b"Subject: broken\nMessage-ID: <m1@example.org>\nMIME-Version: 1.0\n"
                            b"Content-Type: multipart/mixed; boundary=XYZ\n",
                            b"--XYZ\nContent-Type: text/plain\n\nno closing boundary\n"),
                       "malformed MIME"),
    "non-UTF-8 header": (_raw(b"From: operator@example.org\nTo: opus@experience.local\n"
                              b"Subject: caf\xe9 \xff\xfe\nMessage-ID: <m2@example.org>\n",
                              b"text\n"), "undecodable Subject header"),
    "no usable text": (_raw(b"From: operator@example.org\nTo: opus@experience.local\n"
                            b"Subject: picture\nMessage-ID: <m3@example.org>\nMIME-Version: 1.0\n"
                            b"Content-Type: image/png\nContent-Transfer-Encoding: base64\n",
                            b"iVBORw0KGgo=\n"), "no usable text"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_quarantined_with_its_reason(opus_mail: Path, mx: MailSystem,
                                                 case: str) -> None:
    raw, reason = BAD[case]
    mx.send(raw, OPERATOR, OPUS)
    (outcome,) = intake().poll()
    assert outcome.action == "quarantined" and reason in outcome.detail
    assert TaskQueue(paths.home("opus").tasks).counts()["queue"] == 0
    assert len(folder(mx, OPUS, "Quarantine")) == 1 and folder(mx, OPUS, "INBOX") == []
    listed = CliRunner().invoke(cli, ["mail", "quarantine", "opus"])
    assert reason in listed.output


def test_html_only_mail_is_converted_to_text(opus_mail: Path, mx: MailSystem) -> None:
    msg = mail("html")
    msg.set_content("<html><body><p>Summarize <b>the notes</b></p><script>x()</script></body>"
                    "</html>", subtype="html")
    mx.send(msg, OPERATOR, OPUS)
    (outcome,) = intake().poll()
    text = TaskQueue(paths.home("opus").tasks).load("queue", outcome.detail).text
    assert "Summarize" in text and "the notes" in text and "x()" not in text


def test_a_20_mb_attachment_is_refused_by_its_size_alone(opus_mail: Path,
                                                        mx: MailSystem) -> None:
    msg = mail("big one")
    msg.add_attachment(random.Random(1).randbytes(20 * 1024 * 1024), maintype="application",
                       subtype="octet-stream", filename="big.bin")
    mx.send(msg, OPERATOR, OPUS)
    started = time.monotonic()
    (outcome,) = intake().poll()
    assert outcome.action == "quarantined" and "over-size" in outcome.detail
    assert time.monotonic() - started < 5  # decided on RFC822.SIZE: 28 MB never downloaded


def test_small_attachments_are_saved_with_the_task(opus_mail: Path, mx: MailSystem) -> None:
    msg = mail("with notes")
    msg.add_attachment(b"line one\n", maintype="text", subtype="plain", filename="../notes.txt")
    mx.send(msg, OPERATOR, OPUS)
    (outcome,) = intake().poll()
    task = TaskQueue(paths.home("opus").tasks).load("queue", outcome.detail)
    (saved,) = task.meta["attachments"]
    assert (paths.home("opus").dir / saved).read_bytes() == b"line one\n"
    assert ".." not in saved


def test_idle_survives_a_server_killed_and_restarted(opus_mail: Path, mx: MailSystem,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    arrived: list[float] = []
    stop = threading.Event()
    box = intake(timeout=5)
    box.idle_renew_s = 2.0  # notice the dead server quickly
    watcher = threading.Thread(target=box.watch, args=(lambda: arrived.append(1), stop),
                               daemon=True)
    watcher.start()
    try:
        # Its first answer is the catch-up (it had no uidnext): the watch is up.
        wait_for(lambda: arrived)
        mx.kill_dovecot()
        wait_for(lambda: "mail IDLE:" in caplog.text)  # it noticed the dead server
        mx.start_dovecot()
        mx.send(mail("after the restart"), OPERATOR, OPUS)
        # IDLE did notice new mail after the server came back
        wait_for(lambda: len(arrived) >= 2)
    finally:
        stop.set()
    (outcome,) = box.poll()
    assert outcome.action == "task"


def test_a_frozen_server_times_out_with_a_clear_error(opus_mail: Path, mx: MailSystem) -> None:
    mx.freeze(True)
    try:
        started = time.monotonic()
        with pytest.raises(MailError, match=r"IMAP"):
            intake(timeout=2).poll()
        assert time.monotonic() - started < 15
    finally:
        mx.freeze(False)
    assert intake().poll() == []  # and it works again once the server thaws


def test_a_wrong_password_is_clear_and_backs_off(opus_mail: Path, mx: MailSystem) -> None:
    env = opus_mail / ".env"
    env.write_text(env.read_text().replace("EMAIL_PASS=pw-opus", "EMAIL_PASS=wrong"))
    with pytest.raises(MailError, match=r"refused .* check EMAIL_USER and EMAIL_PASS"):
        intake().poll()
    daemon = Daemon("opus", interval_s=3600)
    daemon.mail.start(daemon.scheduler)  # the daemon's mail job, without its loop
    daemon.mail.poll()
    daemon.mail.poll()
    assert daemon.mail.failures == 2
    assert daemon.mail.retry_at - time.monotonic() > 100  # backed off, not a crash loop
    daemon.mail.stop.set()


def test_kill_9_between_fetch_and_move_loses_nothing_and_duplicates_nothing(
        opus_mail: Path, mx: MailSystem) -> None:
    sent = set()
    for i in range(12):
        msg = mail(f"task {i}")
        sent.add(msg["Message-ID"])
        mx.send(msg, OPERATOR, OPUS)
    rng = random.Random(7)
    env = {**os.environ}
    for _ in range(25):
        proc = subprocess.Popen([sys.executable, "-m", "citizen", "mail", "poll", "opus"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.2))  # the kill's random moment is what is tested
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    intake().poll()  # a last clean poll
    tasks = TaskQueue(paths.home("opus").tasks)
    ids = tasks.ids("queue")
    message_ids = [tasks.load("queue", t).meta["message_id"] for t in ids]
    assert sorted(message_ids) == sorted(sent)  # every message exactly once
    assert folder(mx, OPUS, "INBOX") == []


def test_doctor_checks_the_mail_logins(opus_mail: Path, mx: MailSystem,
                                       messages_api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.anthropic_server import API_KEY, text

    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", messages_api.url)
    messages_api.reply(text("ready"))
    good = CliRunner().invoke(cli, ["doctor"])
    assert "ok  mail" in good.output and "logins work" in good.output, good.output
    env = opus_mail / ".env"
    env.write_text(env.read_text().replace("EMAIL_PASS=pw-opus", "EMAIL_PASS=nope"))
    messages_api.reply(text("ready"))
    bad = CliRunner().invoke(cli, ["doctor"])
    assert bad.exit_code == 1 and "FAIL  mail" in bad.output and "EMAIL_PASS" in bad.output


def test_a_daemon_answers_mail_end_to_end(opus_mail: Path, mx: MailSystem,
                                          messages_api: Any) -> None:
    from tests.daemons import daemon_env, start, wait_for, worker

    messages_api.responder = worker
    proc = start(daemon_env(opus_mail.parent, messages_api), "opus", "--interval", "3600",
                 "--first-wake", "3600")
    try:
        original = mail("Write notes/out.md please")
        mx.send(original, OPERATOR, OPUS)
        replies = wait_for(lambda: folder(mx, OPERATOR, "INBOX"), timeout=60, every=0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert replies[0]["In-Reply-To"] == original["Message-ID"], out
    assert (opus_mail / "notes" / "out.md").read_text() == "from the daemon"


def test_the_scheduler_wakes_a_citizen_for_new_mail(opus_mail: Path, mx: MailSystem,
                                                   messages_api: Any) -> None:
    """Under the one scheduler no citizen process waits on its INBOX: the scheduler asks
    (the broker, on a server) whose INBOX grew, and that citizen's wake takes the mail
    in and answers it - without a slot coming (the slots are an hour apart here)."""
    from tests.daemons import daemon_env, start, wait_for, worker

    messages_api.responder = worker
    proc = start(daemon_env(opus_mail.parent, messages_api), "--all", "--scheduler",
                 "--interval", "3600", "--first-wake", "3600")
    try:
        wait_for((opus_mail.parent / ".scheduler" / "state" / "mail.json").exists,
                 timeout=60)  # the INBOX's number is known: mail from now on wakes opus
        original = mail("Write notes/out.md please")
        mx.send(original, OPERATOR, OPUS)
        replies = wait_for(lambda: folder(mx, OPERATOR, "INBOX"), timeout=150, every=0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert replies[0]["In-Reply-To"] == original["Message-ID"], out
    assert (opus_mail / "notes" / "out.md").read_text() == "from the daemon"
    assert "mail: new in the INBOX" in out
