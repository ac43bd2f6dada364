"""`citizen web`: the operator's dashboard (citizen.web) on a loopback port, or the token."""

from __future__ import annotations

import ipaddress

import click

from citizen.cli.terminal import command

DEFAULT_LISTEN = "127.0.0.1:8765"


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not HOST:PORT - e.g. {DEFAULT_LISTEN}",
                                 param_hint="--listen")
    return host, int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


@click.command()
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True,
              help="HOST:PORT to serve on. Anything but loopback must be behind TLS or an "
              "SSH tunnel.")
@click.option("--token", "show_token", is_flag=True,
              help="Print the operator's token (made on first use in dev mode) and exit.")
def web(listen: str, show_token: bool) -> None:
    """The operator's dashboard: every citizen, its wakes and money, live.

    Log in once with the token `--token` prints. On a server, open it through an SSH
    tunnel to the loopback port.

    \b
    Examples:
      citizen web                       http://127.0.0.1:8765/
      citizen web --token               the token to log in with
      ssh -L 8765:127.0.0.1:8765 server  then open http://127.0.0.1:8765/ here
    """
    from citizen.web.auth import load_token  # noqa: PLC0415 - only this command needs the web stack

    if show_token:
        click.echo(load_token())
        return
    host, port = _split(listen)
    if not _loopback(host):
        click.echo(f"warning: serving on {host}, not loopback: put the page behind TLS or "
                   "reach it through an SSH tunnel - the token and session cookie cross the "
                   "network in clear otherwise", err=True)
    import uvicorn  # noqa: PLC0415 - the server only when serving (citizen --help stays fast)

    from citizen.web.app import make_app  # noqa: PLC0415 - same

    app = make_app()
    click.echo(f"the dashboard: http://{host}:{port}/ (log in with `{command('web --token')}`)",
               err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
