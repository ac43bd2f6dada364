"""`citizen remote serve|add-pusher`: the shared repositories' one remote, for a
civilization on several servers (issue 46; citizen.admin.remote, citizen.broker.remote)."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import click

from citizen.admin import remote as remotemod
from citizen.errors import CitizenError

ROOT = Path("/var/lib/experience-remote")  # the unit's StateDirectory
PUSHERS = Path("/etc/experience-remote/pushers")  # the remote operator's, 0600


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` -> (host, port)."""
    found = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:([0-9]{1,5})|([^:\[\]]+):([0-9]{1,5})", listen)
    if not found:
        raise CitizenError(f"--listen {listen!r} is not HOST:PORT or [IPV6]:PORT - e.g. "
                           f"[::]:{remotemod.PORT} or 10.0.0.5:{remotemod.PORT}")
    host, port = (found[1], found[2]) if found[1] else (found[3], found[4])
    return host, int(port)


@click.group()
def remote() -> None:
    """The shared repositories' one remote: the baseline and the world for several servers.

    \b
    On the remote's machine, once per server (its broker's push credential):
      citizen remote add-pusher a --token-file a.token
    then copy a.token to server a as /etc/experience/remote.token (owner
    experience-broker, mode 0600) and name the remote in its civilization.json:
      "remote": "http://[fd7e:e1ab::1]:8418/"
    The remote itself (systemd/experience-remote.service runs this):
      citizen remote serve --listen [fd7e:e1ab::1]:8418
    """


@remote.command("serve")
@click.option("--listen", default=f"[::]:{remotemod.PORT}", show_default=True,
              help="HOST:PORT or [IPV6]:PORT - an address on the civilization's private "
              "network only: fetching needs no credential.")
@click.option("--root", type=click.Path(path_type=Path), default=ROOT, show_default=True,
              help="The directory of the bare repositories (baseline.git, world.git).")
@click.option("--pushers", "pushers_file", type=click.Path(path_type=Path), default=PUSHERS,
              show_default=True, help="The brokers' hashed tokens (0600, this user's).")
def serve(listen: str, root: Path, pushers_file: Path) -> None:
    """Serve the bare repositories over git's smart HTTP until stopped: anyone on the
    network fetches, only a broker with a token pushes, main only moves forward."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, force=True,
                        format="%(levelname)s remote %(message)s")
    server = remotemod.server(root, parse_listen(listen), pushers_file)
    host, port = str(server.server_address[0]), int(server.server_address[1])
    click.echo(f"serving {root} on {f'[{host}]' if ':' in host else host}:{port}")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()


@remote.command("add-pusher")
@click.argument("name")
@click.option("--token-file", type=click.Path(path_type=Path), required=True,
              help="A new file for the token (NAME:TOKEN, 0600): install it on server NAME "
              "as /etc/experience/remote.token, owner experience-broker, then remove it.")
@click.option("--pushers", "pushers_file", type=click.Path(path_type=Path), default=PUSHERS,
              show_default=True, help="The brokers' hashed tokens (0600, the remote's user's).")
def add_pusher(name: str, token_file: Path, pushers_file: Path) -> None:
    """Give server NAME's broker a push credential: its hash into the pushers file, the
    token itself into a new file for that server (never printed)."""
    remotemod.add_pusher(pushers_file, name, token_file)
    click.echo(f"{name} may push; its token is in {token_file} - copy it to that server as "
               "/etc/experience/remote.token (chown experience-broker, chmod 600) and "
               "remove it here")
