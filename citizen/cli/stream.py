"""ThoughtStream from the operator's side: `citizen stream say|list|show|…`, `citizen room`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import click

from citizen import civilization, config, llm
from citizen.admin import presence
from citizen.cli.options import CitizenName, json_option, operator
from citizen.cli.terminal import age, command, echo, table, wide_option
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.home.wakelog import WakeLog
from citizen.llm.base import Request
from citizen.wake.types.stream import reopen, say
from shared.streams import PRESETS, Streams, summary


@click.command("say")
@click.argument("text")
@click.option("--room", default="general", show_default=True)
@click.option("--to", "to", default="", help="Only these citizens (comma-separated).")
@click.option("--wait", type=float, default=60.0, show_default=True,
              help="Seconds to wait for the answers (0: do not wait).")
def say_cmd(text: str, room: str, to: str, wait: float) -> None:
    """Say something to several citizens at once; only those granted answer.

    \b
    Example:
      citizen stream say "Who can explain file locks? @mira"
    """
    names = [n.strip() for n in to.split(",") if n.strip()] or None
    sid = say(text, room=room, to=names, sender=operator())
    echo(f"stream {sid}")
    if wait <= 0:
        return
    streams = civilization.streams()
    deadline, shown = time.monotonic() + wait, set()
    while time.monotonic() < deadline:
        decision = streams.decision(sid)
        if decision and "decision" not in shown:
            shown.add("decision")
            echo(f"granted: {', '.join(decision['granted']) or 'nobody'} "
                 f"({decision['exit']} after {decision['decided_at_ms']} ms, "
                 f"{decision['slots']} slots{_fallback(decision)})")
        for name, r in streams.responses(sid).items():
            if name not in shown:
                shown.add(name)
                echo(f"{name}: {r['text']}")
        if decision and all(n in shown for n in decision["granted"]):
            return
        time.sleep(0.2)
    echo(f"(stopped waiting after {wait:.0f} s; `{command(f'stream show {sid}')}`)")


@click.group("room")
def room() -> None:
    """A room's governance and temperature."""


@room.command("show")
@click.argument("name")  # a room (general, ...), not a citizen
def room_show(name: str) -> None:
    """Show room NAME: preset, moderator changes, temperature now."""
    data = civilization.streams().room(name)
    echo(json.dumps(data, indent=1))


@room.command("presence")
@click.argument("name")  # a room (general, ...), not a citizen
@click.option("--here/--away", default=True, help="The operator is watching room NAME, or left.")
def room_presence(name: str, here: bool) -> None:
    """Tell the citizens whether a person is watching room NAME (it warms or cools it)."""
    temperature = presence.mark(name, here)
    echo(f"room {name}: {'someone is here' if here else 'nobody watches'}; "
         f"temperature {temperature:.2f}")


@room.command("set")
@click.argument("name")  # a room (general, ...), not a citizen
@click.option("--preset", type=click.Choice(list(PRESETS)))
@click.option("--max-responders", type=click.IntRange(1, 10))
@click.option("--min-confidence", type=click.FloatRange(0, 1))
@click.option("--window-ms", type=click.IntRange(0, 60000))
@click.option("--silence", help="Citizens who stay silent here (comma-separated; '' clears).")
@click.option("--boost", multiple=True, help="NAME=DELTA added to a quiet voice's bids.")
@click.option("--pause/--resume", "pause", default=None,
              help="Everyone takes a beat: nobody is granted or answers until resumed.")
def room_set(name: str, *, preset: str | None, max_responders: int | None,
             min_confidence: float | None, window_ms: int | None, silence: str | None,
             boost: tuple[str, ...], pause: bool | None) -> None:
    """Moderate room NAME: a preset, thresholds, silence, boosts, a pause. Silence and
    pause hold for the streams already open, too.

    \b
    Example:
      citizen room set general --preset strict --boost aria=0.2
    """
    changes: dict[str, Any] = {}
    if max_responders is not None:
        changes["max_responders"] = max_responders
    if min_confidence is not None:
        changes["min_confidence"] = min_confidence
    if window_ms is not None:
        changes["intention_window_ms"] = window_ms
    if silence is not None:
        changes["silenced"] = [s.strip() for s in silence.split(",") if s.strip()]
    if pause is not None:
        changes["paused"] = pause
    if boost:
        pairs = []
        for b in boost:
            who, _, delta = b.partition("=")
            try:
                pairs.append([who.strip(), float(delta)])
            except ValueError as exc:
                raise click.BadParameter(f"'{b}': use NAME=DELTA, e.g. aria=0.2") from exc
        changes["boosted"] = pairs
    streams = civilization.streams()
    data = streams.set_room(name, preset, **changes)
    echo(f"room {name}: {data['preset']} {json.dumps(data['changes'])}")
    if pause is False:  # what the pause left undecided is decided now, not never
        for sid in streams.ids():
            row = summary.summary(streams, sid)
            if row["room"] == name and row["state"] == summary.UNDECIDED:
                reopen(sid, sender=operator())
                echo(f"reopened {sid}")


@click.group("decisions")
def decisions() -> None:
    """Coordination decisions: list, show, replay, rate, calibration."""


def _fallback(decision: Mapping[str, Any]) -> str:
    return "; nobody claimed: the most confident answers" if decision.get("fallback") else ""


@decisions.command("list")
@click.option("--open", "only_open", is_flag=True,
              help="Only streams still owed something: undecided, paused, or a person's "
                   "message nobody answered (`citizen stream reopen SID` rings them).")
@wide_option
@json_option
def list_cmd(only_open: bool, wide: bool, as_json: bool) -> None:
    """Streams, newest last: when (an age; ISO in --json), who was granted, how the
    decision was reached, its state (answered, silent, unanswered, undecided, paused),
    what was said."""
    streams = civilization.streams()
    rows = [summary.summary(streams, sid) for sid in streams.ids()]
    if only_open:
        rows = [r for r in rows if r["state"] in summary.OPEN]
    if as_json:
        echo(json.dumps(rows))
        return
    table(["STREAM", "OPENED", "ROOM", "GRANTED", "DECISION", "STATE", "TEXT"],
          [[r["id"], age(r["created"]), r["room"], ",".join(r["granted"] or []) or "-",
            r["exit"] or "undecided", r["state"], r["text"]] for r in rows], wide=wide,
          empty="no streams - open one with `" + command('stream say "TEXT"') + "`")


@decisions.command("reopen")
@click.argument("sid")
def reopen_cmd(sid: str) -> None:
    """Ring the citizens of stream SID again: undecided, its bidders decide it from the
    bids that arrived; decided and unanswered, the granted answer.

    \b
    Example:
      citizen stream list --open
      citizen stream reopen stream-3f2a9c0d1e4b5a6c
    """
    streams = civilization.streams()
    row = summary.summary(streams, sid)
    if row["state"] == summary.PAUSED:
        raise click.ClickException(f"room {row['room']} is paused - resume it with `"
                                   + command(f"room set {row['room']} --resume") + "`")
    if row["state"] not in summary.OPEN:
        echo(f"{sid} is {row['state']}: nothing owed")
        return
    echo(f"{sid} ({row['state']}): rang {', '.join(reopen(sid, sender=operator()))}")


@decisions.command("show")
@click.argument("sid")
@json_option
def show(sid: str, as_json: bool) -> None:
    """Stream SID: every bid with what its bidder saw, the decision, the answers."""
    streams = civilization.streams()
    out = summary.detail(streams, sid)
    if as_json:
        echo(json.dumps(out))
        return
    echo(f"{sid} in {out['room']}: {out['text']!r}")
    echo(f"decision: granted {out['granted']} ({out['exit']}, "
         f"{out['decided_at_ms']} ms{_fallback(out)})")
    for c, rec in out["records"].items():
        if rec:
            echo(f"  {c}: {rec.get('action', '?'):<6} claim={rec['claim']} "
                 f"confidence {rec['confidence']} (raw {rec['raw_confidence']} "
                 f"x{rec['calibration_factor']} calibration "
                 f"x{rec.get('load_factor', 1.0)} load "
                 f"+{rec.get('expertise_boost', 0.0)} focus, {rec['how']}) - "
                 f"{rec['reasoning']}")
    for c, text in out["answers"].items():
        echo(f"{c} answered: {text}")


@decisions.command("replay")
@click.argument("sid")
@click.option("--citizen", "name", required=True, type=CitizenName())
@click.option("--provider", type=click.Choice(["auto", "anthropic", "local"]), default="auto")
@click.option("--prompt-only", is_flag=True,
              help="Without the recorded system prompt and contexts (they are read from "
                   "the citizen's home; use this where that is not readable).")
@click.option("--as", "others", default="",
              help="Replay as these citizens instead (comma-separated): each bids on the "
                   "same message in the same recorded room state; all side by side.")
def replay(sid: str, name: str, provider: str, prompt_only: bool, others: str) -> None:
    """Re-run a recorded bid with another model, or as other citizens; side by side.

    The replay sends what the bidder saw: its recorded prompt, and its system prompt
    and contexts (kept as blobs in the citizen's home, which only it and root read).

    \b
    Example:
      sudo citizen stream replay stream-3f2a9c0d1e4b5a6c --citizen mira --provider local
      citizen stream replay stream-3f2a9c0d1e4b5a6c --citizen mira --as opus,aria
    """
    streams = civilization.streams()
    rec = streams.read_record(sid, name)
    if rec is None:
        raise click.ClickException(f"{name} has no decision record on {sid}")
    if not rec.get("prompt"):
        raise click.ClickException(f"{name} made no bid on {sid} to replay ({rec['how']}: "
                                   f"{rec['reasoning']}) - pick a citizen whose record has one")
    if others:
        _replay_as(streams, sid, rec, [n.strip() for n in others.split(",") if n.strip()],
                   provider)
        return
    model = _model(name, provider)
    system = [] if prompt_only else _recorded_system(name, rec)
    started = time.monotonic()
    schema = config.templates().schema("stream_bid")
    reply = model.complete(Request(messages=[{"role": "user", "content": rec["prompt"]}],
                                   system=system, output_schema=schema, max_tokens=120,
                                   tier="fast", purpose="stream_bid_replay"))
    new = reply.data or {}
    echo(f"{'':<12} {'recorded':<40} replay ({model.describe()})")
    for key, old, now in (("claim", rec["claim"], new.get("claim")),
                          ("confidence", rec["raw_confidence"], new.get("confidence")),
                          ("reasoning", rec["reasoning"][:38], str(new.get("reasoning"))[:60]),
                          ("model", rec.get("model"), reply.model),
                          ("latency s", rec.get("bid_latency_s"),
                           round(time.monotonic() - started, 3))):
        echo(f"{key:<12} {old!s:<40} {now}")


def _citizen_config(name: str) -> config.CitizenConfig:
    try:
        return config.load_citizen(name)
    except (OSError, CitizenError):  # not readable here (another user's home): the template
        return config.templates().citizen(name)


def _model(name: str, provider: str) -> llm.Provider:
    # The operator's own environment (e.g. ANTHROPIC_API_KEY), never a citizen's .env.
    return llm.make_provider(_citizen_config(name), config.load_secrets(None),
                             override="" if provider == "auto" else provider)


def _replay_as(streams: Streams, sid: str, rec: Mapping[str, Any], names: list[str],
               provider: str) -> None:
    """§9.6: the recorded bid beside what each of `names` bids on the same message in
    the same recorded room state (its own name, focus and model; a mention counts for
    whom it names). Their system prompts and contexts of that moment were never
    recorded, so each is asked with the bid prompt alone."""
    values = rec.get("prompt_values")
    if not isinstance(values, dict):
        raise click.ClickException(
            f"{rec.get('author')}'s record on {sid} predates the recorded room state - "
            f"replay it without --as (another model, same citizen)")
    info, schema = streams.info(sid), config.templates().schema("stream_bid")
    rows = [("recorded: " + str(rec.get("author")), rec["claim"], rec["raw_confidence"],
             str(rec["reasoning"]))]
    for other in names:
        if other not in streams.citizens:
            raise click.ClickException(f"no citizen {other} (citizens: "
                                       f"{', '.join(streams.citizens)})")
        prompt = config.templates().prompt(
            "bid", name=other, focus=_citizen_config(other).focus, text=info["text"],
            **{**values, "mentioned": other in info["mentions"]})
        reply = _model(other, provider).complete(Request(
            messages=[{"role": "user", "content": prompt}], output_schema=schema,
            max_tokens=120, tier="fast", purpose="stream_bid_replay"))
        new = reply.data or {}
        rows.append((other, new.get("claim"), new.get("confidence"), str(new.get("reasoning"))))
    echo(f"{'citizen':<22} {'claim':<6} {'confidence':<10} reasoning")
    for who, claim, conf, why in rows:
        echo(f"{who:<22} {claim!s:<6} {conf!s:<10} {why[:80]}")


def _recorded_system(name: str, rec: Mapping[str, Any]) -> list[str]:
    """The system blocks a bid was sent, from `name`'s blobs (none for a record from
    before they were kept)."""
    try:
        return [WakeLog.read_blob(paths.home(name), key) for key in rec.get("system_blobs", [])]
    except OSError as exc:
        raise click.ClickException(
            f"cannot read {name}'s recorded system prompt and contexts ({exc}) - replay as "
            f"root or as {name}, or pass --prompt-only to replay the prompt alone") from None


@decisions.command("rate")
@click.argument("sid")
@click.option("--citizen", "name", required=True, type=CitizenName())
@click.option("--score", type=click.FloatRange(0, 1), required=True,
              help="How much it should have spoken, whatever it did: 1 its answer was "
                   "wanted, 0 it should have stayed silent (a right silence is 0, not 1).")
@click.option("--reasoning", default="", help="Why, in a sentence (kept with the rating).")
def rate(sid: str, name: str, score: float, reasoning: str) -> None:
    """Rate a citizen's bid after the fact: should it have spoken on SID?

    The score is the outcome its bid's confidence predicted. Once it has 3 ratings,
    its calibration factor is mean rating / mean raw confidence (0.5..1.5),
    multiplied into its later confidences: rate above its confidence and it bids
    higher, below and it bids lower. So rate a silence that was right 0 - a 1 tells it to speak.
    The rater is the Unix user running this; a citizen's rating of its own bid is
    refused, and one found in the commons does not count.

    \b
    Example:
      citizen stream rate stream-3f2a9c0d1e4b5a6c --citizen mira --score 0.2
    """
    civilization.streams().rate(sid, name, score, reasoning)
    echo(f"rated {name} on {sid}: {score}")


@decisions.command("calibration")
@wide_option
@json_option
def calibration(wide: bool, as_json: bool) -> None:
    """Each citizen's calibration: mean confidence vs mean rating (from 3 ratings on), and
    the factor applied to its confidences."""
    streams = civilization.streams()
    rows = [streams.calibration(c) for c in streams.citizens]
    if as_json:
        echo(json.dumps(rows))
        return
    table(["CITIZEN", "RATED", "FACTOR", "CONFIDENCE", "RATING", "BRIER"],
          [[r["citizen"], r["rated"], f"{r['factor']:.3f}",
            *((r["mean_confidence"], r["mean_rating"], r["brier"]) if r["rated"] >= 3
              else ("-", "-", "-"))] for r in rows], wide=wide,
          empty=f"no citizens - create them with `{command('init')}`")


@click.group("stream")
def stream() -> None:
    """ThoughtStream: say (open a stream), list and show decisions, reopen, replay,
    rate, calibration; rooms under `citizen room`."""


for _name, _cmd in (("say", say_cmd), ("list", list_cmd), ("show", show), ("replay", replay),
                    ("rate", rate), ("calibration", calibration), ("reopen", reopen_cmd)):
    stream.add_command(_cmd, _name)
