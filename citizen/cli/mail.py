"""`citizen mail`: poll a mailbox now, and list what was quarantined - both through the
broker, which alone logs in to the mailbox."""

from __future__ import annotations

import json

import click

from citizen import config, mail
from citizen.cli.options import citizen_argument, json_option
from citizen.cli.terminal import age, clean, table, wide_option
from citizen.config import paths
from citizen.mail import link
from citizen.mail.intake import Intake
from citizen.mail.outbox import flush


def _intake(name: str) -> Intake:
    return Intake(paths.home(name), config.load_citizen(name), mail.citizen_directory())


@click.group("mail")
def mail_group() -> None:
    """A citizen's mailbox."""


@mail_group.command()
@citizen_argument
def poll(name: str) -> None:
    """Poll citizen NAME's INBOX once and send its outbox, saying what happened to each message.

    \b
    Example:
      sudo -u opus citizen mail poll opus
    """
    paths.require_owner(paths.home(name))
    intake = _intake(name)
    outcomes = intake.poll()
    # A message id and the detail (its sender, subject) are the mail's: cleaned.
    table(["ACTION", "MESSAGE", "DETAIL"],
          [[o.action, o.message_id, o.detail] for o in outcomes])
    sent, error = flush(paths.home(name))
    click.echo(clean(f"{len(outcomes)} messages; {sent} sent from the outbox"
                     + (f"; outbox: {error}" if error else "")))


@mail_group.command()
@citizen_argument
@wide_option
@json_option
def quarantine(name: str, wide: bool, as_json: bool) -> None:
    """List the messages citizen NAME refused, with the reason for each (the broker's
    record: it quarantines strangers and over-size mail before the citizen sees them).

    \b
    Example:
      citizen mail quarantine opus --json
    """
    paths.home(name)  # an unknown name fails here, with the fix
    rows = link.quarantined(name)
    if as_json:
        click.echo(json.dumps(rows))
        return
    # Sender, subject, reason and id come from the mail's headers: table() cleans each.
    # The message id goes last: the column a narrow terminal cuts.
    subject = any(r.get("subject") for r in rows)
    table(["WHEN", "FROM", *(["SUBJECT"] if subject else []), "REASON", "MESSAGE"],
          [[age(r.get("ts") or None), r.get("from", ""),
            *([r.get("subject", "")] if subject else []), r.get("reason", ""),
            r.get("message_id", "")] for r in rows],
          wide=wide, empty="nothing quarantined")
