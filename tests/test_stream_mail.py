"""A person's mail to several citizens: one stream for its Message-ID, every citizen
bids, only the granted one takes the task and answers by mail; the others file it as
left to the winner. Nothing is lost and nobody answers twice."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from citizen.home.tasks import TaskQueue
from tests.anthropic_server import MessagesServer, tool_use
from tests.daemons import cli, daemon_env, heartbeat, routing, start, wait_for
from tests.mailserver import MailSystem, unavailable
from tests.test_mail import OPERATOR, folder, mail, mx, opus_mail  # noqa: F401

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=unavailable() or "available")

CITIZENS = ("opus", "mira", "aria")
BIDS = {"opus": (True, 0.9), "mira": (True, 0.6), "aria": (False, 0.1)}


def council(body: dict[str, Any]) -> dict[str, Any]:
    """Bids by the table above; a task wake routes to 'fast' and completes at once."""
    blob = json.dumps(body)
    if (body.get("tool_choice") or {}).get("name") == "respond" and \
            "claim" in body["tools"][-1]["input_schema"]["properties"]:
        me = re.search(r"You are (\w+), a citizen", blob)[1]  # type: ignore[index]
        claim, conf = BIDS[me]
        return tool_use("respond", {"claim": claim, "confidence": conf,
                                    "reasoning": f"{me} on backups"})
    answer = routing(body, lambda t: t == "task_complete")
    return answer or tool_use("task_complete", {"summary": "Back up with restic, nightly."})


def test_mail_to_three_citizens_is_answered_once(civ: Path, mx: MailSystem,  # noqa: F811
                                                 messages_api: MessagesServer) -> None:
    for name in CITIZENS:
        home = civ / name
        with (home / ".env").open("a") as fh:
            fh.write(mx.env(f"{name}@experience.local"))
        cfg = json.loads((home / "config.json").read_text())
        cfg["mail"] = {"allowed_senders": [OPERATOR]}
        (home / "config.json").write_text(json.dumps(cfg))
    messages_api.responder = council
    env = daemon_env(civ, messages_api)
    procs = [start(env, n, "--interval", "3600", "--first-wake", "3600") for n in CITIZENS]
    try:
        original = mail("How should we back up the server?", body="Which tool, how often?")
        del original["To"]
        original["To"] = ", ".join(f"{n}@experience.local" for n in CITIZENS)
        mx.send(original, OPERATOR, [f"{n}@experience.local" for n in CITIZENS])
        (reply,) = wait_for(lambda: folder(mx, OPERATOR, "INBOX"), timeout=120, every=1.0)
        queues = {n: TaskQueue(civ / n / "tasks") for n in CITIZENS}
        wait_for(lambda: all(len(q.ids("done")) == 1 for q in queues.values()), timeout=60)
        # No wake in flight anywhere: a second answer would have been queued by now. Then
        # what every citizen sent (its own ledger) is all that can ever arrive.
        wait_for(lambda: all(heartbeat(civ, n).get("state") == "sleeping"
                             and not list((civ / n / "mail" / "outbox").glob("*"))
                             for n in CITIZENS), timeout=60)
        sent = [line for n in CITIZENS if (civ / n / "mail" / "sent.jsonl").exists()
                for line in (civ / n / "mail" / "sent.jsonl").read_text().splitlines()]
        assert len(sent) == 1, sent
        replies = folder(mx, OPERATOR, "INBOX")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.communicate(timeout=60)
    streams = [d for d in (civ / "shared" / "streams").iterdir() if d.name.startswith("stream-")]
    assert len(streams) == 1  # three mailboxes, one Message-ID, one stream
    decision = json.loads((streams[0] / "decision.json").read_text())
    (winner,) = decision["granted"]
    assert winner in ("opus", "mira")  # the first claimer fills the one slot
    assert len(replies) == 1 and reply["From"] == f"{winner}@experience.local"
    assert reply["In-Reply-To"] == original["Message-ID"]
    assert "Back up with restic" in reply.get_content()
    for name, queue in queues.items():
        (task_id,) = queue.ids("done")
        task = queue.load("done", task_id)
        assert task.meta["message_id"] == original["Message-ID"]
        events = [h["event"] for h in task.history]
        if name == winner:
            assert "released" in events and "left to another" not in events
        else:  # filed, never worked on: no task wake, no reply
            assert events == ["held", "left to another"] and winner in task.result
            assert not list((civ / name / "logs" / "wakes").glob("*-TASK.jsonl"))
        assert len(folder(mx, f"{name}@experience.local", "Processed")) == 1
    shown = cli(env, "decisions", "show", streams[0].name)
    assert f"{winner}: TOOK_TASK" in shown and "aria: SILENT" in shown


def test_which_mail_opens_a_stream_and_a_lost_stream_loses_no_mail(
        opus_mail: Path, mx: MailSystem) -> None:  # noqa: F811
    from citizen import config
    from citizen.config import paths
    from citizen.mail import citizen_directory
    from citizen.mail.intake import Intake
    from citizen.wake.flow import run_wake
    from tests.scripts import Actor

    def send(subject: str, sender: str = OPERATOR, to: str = "opus, mira") -> str:
        msg = mail(subject, sender=sender)
        del msg["To"]
        msg["To"] = ", ".join(f"{n}@experience.local" for n in to.split(", "))
        mx.send(msg, sender, "opus@experience.local")
        return str(msg["Message-ID"])

    person = send("Who can check the backups?")
    citizen = send("Please check the backups", sender="mira@experience.local")  # allowed
    routed = send("[consensus] Add a backup job")
    alone = send("Only for you", to="opus")
    intake = Intake(paths.home("opus"), config.load_citizen("opus"), citizen_directory())
    outcomes = {o.message_id: o for o in intake.poll()}
    tasks = TaskQueue(paths.home("opus").tasks)
    (held,) = tasks.held()  # only the person's plain mail to several citizens
    assert held.meta["message_id"] == person and held.id == outcomes[person].detail
    sid = held.meta["stream"]
    info = json.loads((opus_mail.parent / "shared" / "streams" / sid / "stream.json")
                      .read_text())
    assert info["participants"] == ["mira", "opus"] and info["human"]
    assert info["source"] == "mail" and info["settings"]["intention_window_ms"] == 30000
    assert info["settings"]["max_responders"] == 1  # one reply per mail unless allowed
    for mid in (citizen, routed, alone):  # queued as before, no stream
        assert tasks.where(outcomes[mid].detail) == "queue"
    assert not intake.poll()  # nothing twice, held or not
    # The stream is lost (deleted by hand): the STREAM wake takes the mail itself.
    import shutil

    shutil.rmtree(opus_mail.parent / "shared" / "streams" / sid)
    result = run_wake("opus", wake_type="STREAM", provider=lambda c, s: Actor())
    assert result.status == "ok"
    assert tasks.where(held.id) == "queue" and not tasks.held()


def test_a_stream_that_cannot_open_leaves_an_ordinary_task(opus_mail: Path,  # noqa: F811
                                                           mx: MailSystem) -> None:  # noqa: F811
    from citizen import config
    from citizen.config import paths
    from citizen.mail import citizen_directory
    from citizen.mail.intake import Intake

    rooms = opus_mail.parent / "shared" / "streams" / "rooms"
    rooms.mkdir(parents=True, exist_ok=True)
    (rooms / "mail.json").write_text("{not json")  # a corrupt room: kept, reported
    msg = mail("Who can check the backups?")
    del msg["To"]
    msg["To"] = "opus@experience.local, mira@experience.local"
    mx.send(msg, OPERATOR, "opus@experience.local")
    intake = Intake(paths.home("opus"), config.load_citizen("opus"), citizen_directory())
    (outcome,) = intake.poll()
    tasks = TaskQueue(paths.home("opus").tasks)
    assert outcome.action == "task" and tasks.where(outcome.detail) == "queue"
    assert not tasks.held() and (rooms / "mail.json").read_text() == "{not json"
