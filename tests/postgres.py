"""A real PostgreSQL for the tests of the several-servers engines: Debian's server
(`postgresql-15`, installed by scripts/test.sh), one throw-away cluster per test session
in a temporary directory, reached by its Unix socket only (no TCP port: nothing outside
this machine's processes can reach it).

`cluster` (session) starts it; `database` (function) gives each test a database of its
own, so tests never see each other's rows. Roles are cluster-wide: a test names its own
(`Cluster.role`). The cluster trusts local connections (pg_hba `trust`): a test connects
as whichever role it is testing - what a role may do is what is tested, not the login,
which on a server is a password in the broker's own passfile (DEPLOY.md).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path("/usr/lib/postgresql/15/bin")


def unavailable() -> str:
    """Why no cluster can be started here ('' when one can)."""
    if not (BIN / "postgres").is_file():
        return "Debian's postgresql-15 is not installed (scripts/test.sh installs it as root)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no postgres user (the postgresql package makes it)"
    return ""


def _as_owner(cmd: list[str]) -> list[str]:
    """`cmd` run as the cluster's owner: initdb and postgres refuse to run as root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class Cluster:
    """One running PostgreSQL server in `data`, listening on a socket in `socket_dir` (and
    on `listen`'s addresses in network namespace `netns`: tests/lab.py's servers)."""

    data: Path
    socket_dir: Path
    port: int = 5432  # the socket's name: .s.PGSQL.<port>
    listen: str = ""  # listen_addresses: none, the socket alone
    netns: str = ""

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host={self.socket_dir} port={self.port} dbname={dbname} user={user}"

    def start(self) -> None:
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []
        subprocess.run([*inside, *_as_owner([str(BIN / "pg_ctl"), "-D", str(self.data), "-w",
                                             "-l", str(self.data / "log"), "-o",
                                             f"-k {self.socket_dir} "
                                             f"-c listen_addresses='{self.listen}' "
                                             f"-p {self.port} -c fsync=on", "start"])],
                       check=True, capture_output=True, timeout=60)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(_as_owner([str(BIN / "pg_ctl"), "-D", str(self.data), "-w", "-m",
                                  mode, "stop"]), check=False, capture_output=True, timeout=60)

    def restart(self) -> None:
        """Stop (`immediate`: as a crash, no checkpoint) and start again."""
        self.stop("immediate")
        self.start()

    def sql(self, statement: str, dbname: str = "postgres") -> str:
        out = subprocess.run([str(BIN.parent / "bin" / "psql"), "-X", "-qAt", "-v",
                              "ON_ERROR_STOP=1", "-d", self.dsn(dbname), "-c", statement],
                             check=True, capture_output=True, text=True, timeout=60)
        return out.stdout.strip()

    def role(self, prefix: str) -> str:
        """A new, unique role name (roles are shared by every database of the cluster)."""
        return f"{prefix}_{secrets.token_hex(4)}"


def initdb(top: Path) -> tuple[Path, Path]:
    """A new cluster's data directory and socket directory in `top` (made by mkdtemp)."""
    data, sock = top / "data", top / "sock"
    sock.mkdir()
    if os.geteuid() == 0:  # mkdtemp's 0700 kept: the cluster's owner alone (root passes)
        shutil.chown(top, "postgres")
        shutil.chown(sock, "postgres")
    subprocess.run(_as_owner([str(BIN / "initdb"), "-D", str(data), "-U", "postgres",
                              "--auth=trust", "-E", "UTF8", "--no-instructions"]),
                   check=True, capture_output=True, timeout=120)
    return data, sock


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    why = unavailable()
    if why:
        pytest.skip(why)
    top = Path(tempfile.mkdtemp(prefix="experience-pg-"))
    c = Cluster(*initdb(top))
    c.start()
    try:
        yield c
    finally:
        c.stop("immediate")
        with contextlib.suppress(OSError):
            shutil.rmtree(top)


@pytest.fixture
def database(cluster: Cluster) -> Iterator[str]:
    """A database of this test's own, by name; dropped after it."""
    name = f"t_{secrets.token_hex(6)}"
    cluster.sql(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            cluster.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
