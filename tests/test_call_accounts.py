"""The broker's bill and the wake's count are one account (issue 43, 4d): the SDK's own
retries happened below the meter, so the broker settled attempts (one the SDK abandoned
at its timeout and retried, on a loaded machine) that the wake never logged - 6 settled
against 4 `llm_call` events. Retries are now the provider's, only after an answer the
broker did not bill, and a call outwaits the broker's own upstream timeout."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from citizen import config
from citizen.broker import service, upstream
from citizen.llm import make_provider
from citizen.llm.base import Request
from citizen.wake.meter import Meter
from tests.anthropic_server import API_KEY, MessagesServer, text

pytestmark = pytest.mark.usefixtures("civ")


def _provider(civ: Path, url: str):  # type: ignore[no-untyped-def]
    (civ / "opus" / ".env").write_text(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL={url}\n")
    return make_provider(config.load_citizen("opus"), config.load_secrets("opus"))


def test_the_sdk_never_retries_below_the_meter_and_outwaits_the_broker(
        civ: Path, messages_api: MessagesServer) -> None:
    llm = _provider(civ, messages_api.url)
    assert llm.client.max_retries == 0  # an SDK retry is an attempt the wake never sees
    # The broker gives up on its upstream first and answers: no attempt it may still
    # settle is abandoned by the wake.
    assert llm.client.timeout > upstream.READ_TIMEOUT_S


def test_a_retried_call_is_billed_once_and_logged_once(
        civ: Path, messages_api: MessagesServer) -> None:
    llm = _provider(civ, messages_api.url)
    messages_api.error(529)  # overloaded: the broker releases it, the provider retries
    messages_api.reply(text("hi"))
    events: list[str] = []

    class Log:
        number, wake_type = 1, "TASK"

        def event(self, kind: str, **_: object) -> None:
            events.append(kind)

        def blob(self, _: object) -> str:
            return ""

    budget = config.load_citizen("opus").budget
    meter = Meter(Log(), budget)  # type: ignore[arg-type]
    reply = meter.call(llm, Request(system=("You are opus.",), max_tokens=50,
                                    messages=({"role": "user", "content": "Say hi"},),
                                    purpose="test"))
    assert reply.text == "hi"
    db = sqlite3.connect(service.ledger_path())
    billed = [r[0] for r in db.execute("SELECT state FROM calls WHERE state = 'settled'")]
    db.close()
    assert len(billed) == events.count("llm_call") == meter.calls == 1
