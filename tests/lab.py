"""Several servers on one private network, booted (issue 46; ../shared/TESTBEDS.md, "Several
servers on one private network"): a network namespace this run makes, a bridge in it, one
veth pair per container (IPv6 unique-local addresses, no route out), ONE PostgreSQL for
every server in the namespace itself, and each container set up by scripts/setup_server.sh
with --join, as an operator would.

    lab = tests.lab.fixture({"a": ("opus",), "b": ("mira",)})   # module-scoped: one boot

The admin's side runs on this host (`citizen civilization install|add-server`, over the
cluster's Unix socket, trusted); each server's broker logs in over the lab's network with
its role's password (SCRAM), which only `setup_server.sh --join` puts on the server. No
packet leaves the lab, so setup installs offline: pip from a wheelhouse built once on this
host, libpq5 from its Debian package (tests/offline.py). Everything is torn down at the
end - containers by their nspawn pid, the cluster, the namespace - whatever happened.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from citizen.config import paths
from tests import nspawn, offline, postgres
from tests.installed_server import Server, install
from tests.nspawn import PYTHON, Container
from tests.postgres import Cluster

PREFIX = "fd7e:e1ab::"  # the lab's /64 (TESTBEDS.md): unique-local, routed nowhere
DB_ADDRESS = f"{PREFIX}10"  # the database, on the namespace's bridge
DATABASE = "experience"
BRIDGE_MAC = "02:7e:e1:ab:00:10"  # locally administered (the 02 bit): no card has it
PASSWORD_FILE = "/root/civilization.pass"  # noqa: S105 - where a server gets the admin's file
RELEASE_ENV = ("CIV_ROOT=/home", "PYTHONPATH=/opt/experience/release",
               "PYTHONDONTWRITEBYTECODE=1")  # as the broker's unit runs the release
T = TypeVar("T")


def unavailable() -> str:
    """Why no lab can be booted here ('' when one can)."""
    if shutil.which("ip") is None:
        return "ip is missing (apt-get install iproute2)"
    return nspawn.unavailable() or postgres.unavailable()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Network:
    """The lab's namespace and bridge; each container is plugged in by a veth pair."""

    tag: str  # unique to this run: the namespace and interface names carry it

    @property
    def netns(self) -> str:
        return f"exlab-{self.tag}"

    def create(self) -> None:
        _ip("netns", "add", self.netns)
        _ip("-n", self.netns, "link", "set", "lo", "up")
        # A MAC of its own: a bridge without one takes its ports' lowest, so one server's
        # veth going (powered off) could change it under the other's neighbour cache, and
        # the other's packets to the database went nowhere until that entry expired.
        _ip("-n", self.netns, "link", "add", "br0", "address", BRIDGE_MAC, "type", "bridge")
        _ip("-n", self.netns, "link", "set", "br0", "up")
        # nodad: usable at once (a tentative address cannot be bound by the database).
        _ip("-n", self.netns, "addr", "add", f"{DB_ADDRESS}/64", "dev", "br0", "nodad")

    def plug(self, box: Container, host: int) -> str:
        """Connect the booted `box` to the bridge as PREFIX<host>; its address."""
        inner, outer = f"vx{self.tag}{host}", f"vh{self.tag}{host}"  # at most 15 characters
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", outer, "netns", self.netns)
        _ip("-n", self.netns, "link", "set", outer, "master", "br0", "up")
        # nspawn's --network-interface= refuses without udev: moved in after the boot.
        _ip("link", "set", inner, "netns", str(box.systemd_pid))
        inside = ["nsenter", "-t", str(box.systemd_pid), "-n", "ip"]
        address = f"{PREFIX}{host}"
        for args in (["link", "set", inner, "up"],
                     ["addr", "add", f"{address}/64", "dev", inner, "nodad"]):
            subprocess.run([*inside, *args], check=True, capture_output=True, timeout=30)
        return address

    def delete(self) -> None:
        """The namespace, its bridge and every veth pair with it (a pair dies together)."""
        subprocess.run(["ip", "netns", "del", self.netns], check=False, capture_output=True,
                       timeout=30)


def database(network: Network, top: Path) -> Cluster:
    """The civilization's PostgreSQL for the lab's namespace, not started: the admin over
    its Unix socket, the servers' roles over the lab's network by password."""
    data, sock = postgres.initdb(top)
    hba = data / "pg_hba.conf"
    hba.write_text(
        "# The admin: root on this host, over the socket (its directory is postgres's, 0700).\n"
        "local all postgres trust\n"
        "# Each server's broker role, from the lab's network, by its password.\n"
        f"host {DATABASE} +experience_server {PREFIX}/64 scram-sha-256\n")
    shutil.chown(hba, "postgres")
    return Cluster(data, sock, listen=DB_ADDRESS, netns=network.netns)


def admin(dsn: str, *args: str) -> str:
    """`citizen civilization ARGS` as the admin, the connection string in its variable."""
    done = subprocess.run([sys.executable, "-m", "citizen", "civilization", *args],
                          env={**os.environ, "EXPERIENCE_ADMIN_DSN": dsn}, capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"citizen civilization {' '.join(args)}: {done.stderr}")
    return done.stdout


@dataclass
class Lab:
    """The booted servers by name, and the database they share."""

    netns: str
    cluster: Cluster
    servers: dict[str, Server] = field(default_factory=dict)
    # Each server role's password, to look for where it must not be (not in a failure's repr).
    passwords: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def admin_dsn(self) -> str:
        return self.cluster.dsn(DATABASE)

    def dsn(self, server: str) -> str:
        """Server `server`'s connection string as given to --join (no password in it)."""
        return f"host={DB_ADDRESS} port={self.cluster.port} dbname={DATABASE} user=" \
               f"experience_{server}"

    def box(self, server: str) -> Container:
        return self.servers[server].box

    def release_python(self, server: str, user: str,
                       *args: str) -> subprocess.CompletedProcess[str]:
        """The server's Python with ARGS, run on `server` as `user` with the release, as
        the broker's unit runs it (`-c CODE` or `-m MODULE`); its exit not checked."""
        return self.box(server).run("runuser", "-u", user, "--", "env", *RELEASE_ENV,
                                    PYTHON, *args, check=False)


def _each(items: Sequence[T], act: Callable[[T], Any]) -> list[Any]:
    """`act` on every item at once (threads: each waits on a container), in order."""
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(act, items))


@contextmanager
def booted(citizens: Mapping[str, Sequence[str]]) -> Iterator[Lab]:
    """A lab of one server per key of `citizens` (each with those citizens), joined to
    one database; torn down at the end whatever happened."""
    names = list(citizens)
    wheels, debs = offline.wheelhouse(), offline.debs()  # built once, before any boot
    tag = secrets.token_hex(3)
    with ExitStack() as stack:
        network = Network(tag)
        stack.callback(network.delete)
        network.create()
        top = Path(tempfile.mkdtemp(prefix="experience-lab-"))
        stack.callback(shutil.rmtree, top, ignore_errors=True)
        cluster = database(network, top)
        stack.callback(cluster.stop, "immediate")  # before start: one half-started goes too
        cluster.start()
        cluster.sql(f"CREATE DATABASE {DATABASE}")
        lab = Lab(network.netns, cluster)
        admin(lab.admin_dsn, "install")
        for name in names:
            pass_file = top / f"{name}.pass"
            admin(lab.admin_dsn, "add-server", name, "--password-file", str(pass_file))
            lab.passwords[name] = pass_file.read_text().strip()
        boxes = []
        for name in names:
            box = Container(paths.project_dir(), name=f"exlab-{tag}-{name}", args=[
                "--private-network", f"--bind-ro={wheels}:/srv/wheels",
                f"--bind-ro={debs}:/srv/debs"])
            boxes.append(box)
        # Registered before the boots: one that fails is stopped too; all at once (≈4 s each).
        stack.callback(_each, boxes, Container.shutdown)
        started = time.monotonic()
        _each(boxes, Container.boot)
        print(f"\nlab {network.netns}: {len(boxes)} servers booted in "
              f"{time.monotonic() - started:.1f} s")
        for host, (name, box) in enumerate(zip(names, boxes, strict=True), start=1):
            network.plug(box, host)
            box.run("sh", "-c", "dpkg -i /srv/debs/*.deb >/dev/null")  # offline.debs says why
            # 0600 root's, through stdin: the password is in no process's arguments.
            box.run("sh", "-c", f"umask 077 && cat > {PASSWORD_FILE}",
                    input=lab.passwords[name] + "\n")

        def set_up(name: str) -> Server:
            box = boxes[names.index(name)]
            return install(box, "--join", name, "--database", lab.dsn(name), "--password-file",
                           PASSWORD_FILE, *citizens[name], env=offline.PIP_OFFLINE)

        started = time.monotonic()
        lab.servers = dict(zip(names, _each(names, set_up), strict=True))
        print(f"lab {network.netns}: setup_server.sh --join on {len(names)} servers at once: "
              f"{time.monotonic() - started:.1f} s")
        yield lab


def fixture(citizens: Mapping[str, Sequence[str]]) -> Any:
    """A module-scoped pytest fixture: one booted lab of these servers and citizens for
    the module (skipped, saying why, where no lab can be booted)."""

    @pytest.fixture(scope="module")
    def lab() -> Iterator[Lab]:
        why = unavailable()
        if why:
            pytest.skip(why)
        with booted(citizens) as made:
            yield made

    return lab
