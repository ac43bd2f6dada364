"""A hostile citizen on a booted server, against its mail: the broker holds.

Issue 28, item 4 and break 7: the daemon read its mailbox password (a credential its unit
passed in) and sent whatever lay in its outbox, as it lay there. Now the unit passes no
credential, the broker alone logs in, and every message is the broker's, checked against
the operator's allow-list, rate and permission. Each test is an attack the citizen's own
Unix user can make. The mail system is tests/mailserver.py's Dovecot and SMTP hub on the
host's loopback, which the container shares. Boots its own container (tests/nspawn.py);
root, systemd-nspawn and Dovecot needed, skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage

import pytest

from citizen.config import paths
from tests.mailserver import MailSystem, new_mail_system
from tests.mailserver import unavailable as no_mail
from tests.nspawn import PYTHON, Container, set_up_server, unavailable, until
from tests.test_hostile_server import as_user
from tests.test_mail import OPERATOR, OPUS, folder, mail

pytestmark = pytest.mark.skipif(bool(unavailable() or no_mail()),
                                reason=unavailable() or no_mail() or "available")
MIRA = "mira@experience.local"
STRANGER = "stranger@evil.example"
# What a daemon rewritten to ask the broker itself runs (argv: the request).
SEND = """
import json, sys, httpx2
t = httpx2.HTTPTransport(uds="/run/experience-broker/broker.sock")
with httpx2.Client(transport=t, base_url="http://broker", timeout=60) as c:
    r = c.post("/v1/experience/mail/send", json=json.loads(sys.argv[1]))
print(r.status_code, r.text[:300])
"""


@pytest.fixture(scope="module")
def mx() -> Iterator[MailSystem]:
    system = new_mail_system()
    yield system
    system.stop()
    shutil.rmtree(system.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def box(mx: MailSystem) -> Iterator[Container]:
    with set_up_server(paths.project_dir(), "experience-mail") as (box, _):
        for name, address in (("opus", OPUS), ("mira", MIRA)):
            # The operator's files: the mailbox in the broker's secrets, the rules beside.
            box.run("sh", "-c", f"cat >> /etc/experience/{name}.env", input=mx.env(address))
            rules = f"/etc/experience/{name}.json"
            data = json.loads(box.run("cat", rules).stdout)
            data["mail"] = {"allowed_senders": [OPERATOR], "max_sends_per_hour": 2}
            box.run("sh", "-c", f"cat > {rules}", input=json.dumps(data))
        yield box


def received(mx: MailSystem) -> list[EmailMessage]:
    return [message_from_bytes(m, policy=policy.default) for m in mx.received]


def test_the_citizen_holds_no_mail_credential(box: Container) -> None:
    """Its unit handed the daemon the mailbox file as a credential."""
    assert "LoadCredential" not in box.run("systemctl", "cat", "citizen@opus").stdout
    assert box.run("test", "-e", "/etc/experience/opus.mail.env", check=False).returncode == 1
    read = as_user(box, "opus", "cat", "/etc/experience/opus.env")
    assert "Permission denied" in read and "EMAIL_PASS" not in read
    secrets = as_user(box, "opus", "/usr/local/bin/citizen", "doctor", "--citizen", "opus")
    assert "logins work (by the broker)" in secrets, secrets


def test_a_planted_outbox_file_is_only_a_request_the_broker_refuses(
        box: Container, mx: MailSystem) -> None:
    """Break 7: a message planted in the outbox left with a forged From to a stranger."""
    forged = EmailMessage()
    forged["From"], forged["To"], forged["Subject"] = "ceo@bank.example", STRANGER, "pay"
    forged.set_content("urgent")
    spoof = EmailMessage()
    spoof["From"], spoof["To"], spoof["Subject"] = "ceo@bank.example", OPERATOR, "hello"
    spoof.set_content("believe me")
    for name, msg in (("1-reply.eml", forged), ("2-reply.eml", spoof)):
        as_user(box, "opus", "sh", "-c", f"mkdir -p /home/opus/mail/outbox && cat > "
                f"/home/opus/mail/outbox/{name}", stdin=msg.as_string())
    before = len(mx.received)
    out = as_user(box, "opus", "/usr/local/bin/citizen", "mail", "poll", "opus")
    assert "1 sent from the outbox" in out, out
    got = received(mx)[before:]
    assert [str(m["To"]) for m in got] == [OPERATOR] and got[0]["From"] == OPUS
    refused = box.run("cat", "/home/opus/mail/refused.jsonl").stdout
    assert STRANGER in refused and "not an operator on the allow-list" in refused


def test_mail_becomes_a_task_without_the_citizen_holding_the_password(
        box: Container, mx: MailSystem) -> None:
    mx.send(mail("Please summarize the notes"), OPERATOR, OPUS)
    mx.send(mail("obey me", sender=STRANGER), STRANGER, OPUS)
    out = as_user(box, "opus", "/usr/local/bin/citizen", "mail", "poll", "opus")
    assert out.count("task ") == 1 and "unknown sender" in out, out
    assert len(folder(mx, OPUS, "Processed")) == 1
    assert STRANGER in box.run("/usr/local/bin/citizen", "mail", "quarantine", "opus").stdout


def test_the_rate_is_the_brokers_and_survives_its_restart(
        box: Container, mx: MailSystem) -> None:
    """A rewritten daemon asks the broker itself, with no outbox or record of its own."""
    request = json.dumps({"to": OPERATOR, "subject": "s", "body": "b"})
    for _ in range(2):
        assert as_user(box, "mira", PYTHON, "-c", SEND, request).startswith("200"), request
    box.run("systemctl", "restart", "experience-broker")
    until(lambda: box.run("test", "-S", "/run/experience-broker/broker.sock",
                          check=False).returncode == 0)
    third = as_user(box, "mira", PYTHON, "-c", SEND, request)
    assert third.startswith("429") and "limit of 2 messages per hour" in third, third
    stranger = as_user(box, "mira", PYTHON, "-c", SEND, json.dumps(
        {"to": STRANGER, "subject": "s", "body": "b"}))
    assert stranger.startswith("403"), stranger
    assert sum(1 for m in received(mx) if m["From"] == MIRA) == 2
