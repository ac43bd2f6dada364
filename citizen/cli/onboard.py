"""`citizen onboard`: add a citizen to this server (root), or decide what citizens asked."""

from __future__ import annotations

import json
from typing import Any

import click

from citizen.admin.onboard import onboard as do_onboard
from citizen.broker.newcomer import approve, reject, requests
from citizen.cli.options import json_option
from citizen.cli.terminal import clean


@click.command()
@click.argument("name", required=False)
@click.option("--email", default="", help="The citizen's address (default NAME@experience.local).")
@click.option("--focus", default="", help="What the citizen focuses on (default General).")
@click.option("--no-enable", is_flag=True, help="Do not enable its systemd unit.")
@click.option("--list", "listing", is_flag=True,
              help="Show the citizens that citizens asked for (pending first).")
@click.option("--approve", metavar="REQ", default="",
              help="Create the citizen of request REQ (its id, or the name asked for).")
@click.option("--reject", metavar="REQ", default="", help="Refuse request REQ (with --why).")
@click.option("--why", default="", help="Why a request is rejected (its author reads it).")
@json_option
def onboard(*, name: str | None, email: str, focus: str, no_enable: bool, listing: bool,
             approve: str, reject: str, why: str, as_json: bool) -> None:
    """Create citizen NAME end to end: user, home, code clone, config, .env, unit.

    Run as root. Running it again changes nothing. Start it afterwards with
    `systemctl start citizen@NAME`.

    A citizen the operator lets onboard (permissions.can_onboard_citizens) asks for
    newcomers with its citizen_request tool; the broker checks and records each
    request, and nothing is created until root approves it here.

    \b
    Examples:
      sudo citizen onboard nova --focus "Testing" --email nova@example.org
      sudo citizen onboard --list
      sudo citizen onboard --approve 0001-nova && sudo systemctl start citizen@nova
      sudo citizen onboard --reject 0002-vega --why "one tester is enough"
    """
    chosen = [x for x in (name, listing, approve, reject) if x]
    if len(chosen) != 1:
        raise click.UsageError("give a NAME, or one of --list, --approve REQ, --reject REQ")
    if listing:
        _list(as_json)
    elif approve:
        _approve(approve, enable=not no_enable)
    elif reject:
        _reject(reject, why)
    else:
        changed = do_onboard(str(name), email=email, focus=focus, enable=not no_enable)
        for item in changed:
            click.echo(f"created {item}")
        click.echo(f"citizen {name}: " + ("ready" if changed else
                                          "already complete, nothing changed"))


def _list(as_json: bool) -> None:
    found = sorted(requests(), key=lambda r: (r["status"] != "pending", r["id"]))
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("no citizen has asked for a citizen")
        return
    for r in found:
        # What a citizen wrote is shown as text, never as terminal control.
        click.echo(clean(f"{r['id']:<16} {r['status']:<9} by {r['author']:<10} "
                         f"{r['requested_at']}  focus: {r['focus']}"))
        click.echo(clean(f"    strengths: {', '.join(r.get('strengths') or []) or '-'}"))
        click.echo(clean(f"    why: {r['why']}"))
        if r.get("decision_why"):
            click.echo(clean(f"    {r['status']} because: {r['decision_why']}"))


def _approve(ref: str, *, enable: bool) -> None:
    record, changed = approve(ref, enable=enable)
    for item in changed:
        click.echo(clean(f"created {item}"))
    click.echo(clean(f"citizen {record['name']} created, asked for by {record['author']} "
                     f"(request {record['id']}); start it: systemctl start "
                     f"citizen@{record['name']}"))


def _reject(ref: str, why: str) -> None:
    if not why.strip():
        raise click.UsageError("say why with --why (the citizen who asked reads it)")
    record: dict[str, Any] = reject(ref, why)
    click.echo(clean(f"request {record['id']} for {record['name']} rejected"))
