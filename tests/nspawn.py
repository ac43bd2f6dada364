"""A real systemd, booted in a container with systemd-nspawn (shared/TESTBEDS.md).

The Debian root filesystem is debootstrapped once and cached; each test module boots
a throw-away copy of it (`--ephemeral`), so every run starts from a fresh server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOTFS = Path(os.environ.get("EXPERIENCE_ROOTFS", "/var/cache/experience/rootfs-bookworm"))
# polkitd: the rule that lets the scheduler start wake units (tests/test_scheduler_units_server.py).
PACKAGES = ("systemd,systemd-sysv,dbus,procps,libpam-systemd,python3,python3-venv,python3-pip,"
            "git,ca-certificates,bubblewrap,restic,polkitd")
STAMP = ".experience-packages"  # what the cached root filesystem was built with
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a root login shell's PATH
SETUP = "/srv/project/scripts/setup_server.sh"  # the checkout, bound read-only
# pip inside the container trusts the host's CA bundle (copied into the root filesystem).
PIP_ENV = {"PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"}
PYTHON = "/opt/experience/venv/bin/python"  # the server's venv, as the units run it


def unavailable() -> str:
    """Why a container cannot be booted here ('' when it can)."""
    if os.geteuid() != 0:
        return "booting a container needs root"
    for tool in ("systemd-nspawn", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install systemd-container)"
    if not ROOTFS.is_dir() and shutil.which("debootstrap") is None:
        return "no cached root filesystem and no debootstrap (apt-get install debootstrap)"
    return ""


def _mirror() -> str:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def ensure_rootfs() -> Path:
    """The cached Debian root filesystem, built on first use (≈2.5 min) and again when
    PACKAGES changes (a cache from an older checkout lacks what the tests now need)."""
    if ROOTFS.is_dir():
        stamp = ROOTFS / STAMP
        if stamp.is_file() and stamp.read_text() == PACKAGES:
            return ROOTFS
        shutil.rmtree(ROOTFS)
    partial = ROOTFS.with_name(ROOTFS.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm",
                    str(partial), _mirror()], check=True, capture_output=True)
    # pip inside the container must trust what the host trusts (an egress proxy's CA).
    for crt in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy(crt, partial / "usr/local/share/ca-certificates" / crt.name)
    subprocess.run(["chroot", str(partial), "update-ca-certificates"], check=True,
                   capture_output=True)
    (partial / STAMP).write_text(PACKAGES)
    partial.rename(ROOTFS)
    return ROOTFS


class Container:
    """One booted, ephemeral container with the project bound read-only at /srv/project."""

    def __init__(self, project: Path, name: str = "experience-test",
                 args: Sequence[str] = ()) -> None:
        self.project = project
        self.name = name
        self.args = tuple(args)  # more of nspawn's options (tests/lab.py: a private network)
        self.proc: subprocess.Popen[bytes] | None = None
        self.systemd_pid = 0

    def boot(self, timeout: float = 90.0) -> None:
        self.proc = subprocess.Popen(
            ["systemd-nspawn", "-D", str(ensure_rootfs()), "--ephemeral", "--boot",
             "--register=no", "--keep-unit", "--console=passive", f"--machine={self.name}",
             f"--bind-ro={self.project}:/srv/project", *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-P", str(self.proc.pid), "-x", "systemd"],
                                   capture_output=True, text=True, check=False).stdout.split()
            if found:
                self.systemd_pid = int(found[0])
                state = self.run("systemctl", "is-system-running", check=False).stdout.strip()
                if state in ("running", "degraded"):
                    return
            if self.proc.poll() is not None:
                raise RuntimeError("systemd-nspawn exited while booting")
            time.sleep(0.3)
        raise RuntimeError("the container did not finish booting")

    def run(self, *cmd: str, check: bool = True, timeout: float = 600.0,
            env: dict[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command inside, as root, with a clean environment (`env -i`)."""
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        result = subprocess.run(
            ["nsenter", "-t", str(self.systemd_pid), "-m", "-u", "-i", "-n", "-p", "-C", "-r",
             "-w", "env", "-i", f"PATH={PATH}", *extra, *cmd],
            capture_output=True, text=True, timeout=timeout, check=False, input=input)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def shutdown(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()  # SIGTERM to nspawn powers the container off
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def set_up_server(project: Path, name: str = "experience-test") -> Iterator[tuple[Container, str]]:
    """A fresh server: booted, `scripts/setup_server.sh` run; (the container, setup's
    output). Shut down at the end, whatever happened."""
    box = Container(project, name=name)
    box.boot()
    try:
        yield box, box.run(SETUP, env=PIP_ENV, timeout=900).stdout
    finally:
        box.shutdown()


def until(check: Callable[[], object], timeout: float = 120.0, every: float = 0.2) -> None:
    """Wait until `check()` holds (polling a server we do not control).

    :raises AssertionError: it did not within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s")
        time.sleep(every)


def operator_budget(box: Container, name: str, **budget: float) -> None:
    """Set budget keys in the operator's rules for citizen `name` (root's file)."""
    operator_set(box, name, "budget", **budget)


def operator_set(box: Container, name: str, section: str, **values: object) -> None:
    """Set keys of one section in the operator's rules for citizen `name` (root's file)."""
    path = f"/etc/experience/{name}.json"
    data = json.loads(box.run("cat", path).stdout)
    data[section] = {**data.get(section, {}), **values}
    box.run("sh", "-c", f"cat > {path}", input=json.dumps(data))


QUICK_TEST = "true"  # the operator's evolution.test_command where a test needs a run, fast


def ran_tests(box: Container, name: str, change_id: str) -> str:
    """`code_test` of a change as citizen `name` under a quick test command (issue 43: a
    report rests on the reporter's own run); what the tool said."""
    operator_set(box, name, "evolution", test_command=QUICK_TEST)
    out = box.run("runuser", "-u", name, "--", "citizen", "tool", name, "code_test",
                  json.dumps({"change_id": change_id})).stdout
    if not out.startswith("tests passed"):
        raise AssertionError(f"{name}'s code_test of {change_id}: {out}")
    return out
