"""`citizen onboard`: add a citizen to this server (root)."""

from __future__ import annotations

import click

from citizen.onboard import onboard as do_onboard


@click.command()
@click.argument("name")
@click.option("--email", default="", help="The citizen's address (default NAME@experience.local).")
@click.option("--focus", default="", help="What the citizen focuses on (default General).")
@click.option("--no-enable", is_flag=True, help="Do not enable its systemd unit.")
def onboard(name: str, email: str, focus: str, no_enable: bool) -> None:
    """Create citizen NAME end to end: user, home, code clone, config, .env, unit.

    Run as root. Running it again changes nothing. Start it afterwards with
    `systemctl start citizen@NAME`.

    \b
    Example:
      sudo citizen onboard nova --focus "Testing" --email nova@example.org
    """
    changed = do_onboard(name, email=email, focus=focus, enable=not no_enable)
    for item in changed:
        click.echo(f"created {item}")
    click.echo(f"citizen {name}: " + ("ready" if changed else "already complete, nothing changed"))
