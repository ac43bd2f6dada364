"""Whether a citizen's unit sees the network: the operator's rule, enforced by systemd.

`permissions.can_use_network` used to be enforced only by the citizen's own daemon (its
commands' sandbox), which the citizen may rewrite. Now the unit itself gets a private
network namespace - loopback only - unless the operator's rules grant the network (or
name an `llm.local_url` server the daemon must reach). A daemon needs nothing more: the
model and mail reach it through the broker's Unix socket, which a network namespace
does not cut. Applied by `citizen onboard` (and so by setup) as a drop-in; after changing
the permission, run `citizen onboard NAME` again and restart the citizen.
"""

from __future__ import annotations

import os
from pathlib import Path

from citizen import config
from citizen.config import paths

UNIT_DIR_ENV = "EXPERIENCE_UNIT_DIR"  # tests: where drop-ins go instead of /etc/systemd
DROP_IN = """# Made by `citizen onboard` (citizen/admin/network.py) from the rules: without
# permissions.can_use_network this citizen's daemon and everything it runs see only
# loopback; the model and mail reach it through the broker's socket.
[Service]
PrivateNetwork=yes
"""


UNITS = ("citizen", "citizen-wake")  # its daemon's unit, and its wakes' under the scheduler


def drop_in(name: str, unit: str = "citizen") -> Path:
    base = Path(os.environ.get(UNIT_DIR_ENV) or "/etc/systemd/system")
    return base / f"{unit}@{paths.check_name(name)}.service.d" / "network.conf"


def closed(name: str) -> bool:
    """The operator's rules keep this citizen off the network."""
    cfg = config.load_citizen(name, own=False)  # the operator's files, never the home's
    return not cfg.permissions.get("can_use_network", False) and not cfg.llm.local_url


def apply(name: str) -> list[str]:
    """Write or remove the citizen's network drop-ins as its rules say - for its daemon's
    unit and for its wake unit (docs/architecture.md §7), so a citizen run by the
    scheduler is held to the same rule; what changed."""
    want = DROP_IN if closed(name) else None
    return [line for unit in UNITS for line in _apply(drop_in(name, unit), want, name)]


def _apply(path: Path, want: str | None, name: str) -> list[str]:
    # door: root's systemd drop-ins in /etc/systemd (no citizen's), here and below.
    have = path.read_text(encoding="utf-8") if path.is_file() else None  # door: root's
    if have == want:
        return []
    if want is None:
        path.unlink()
        return [f"{path} removed: the operator grants {name} the network"]
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)  # root's, like the units
    path.write_text(want, encoding="utf-8")  # door: root's /etc/systemd
    path.chmod(0o644)  # door: root's /etc/systemd; systemd reads it, only root writes it
    return [f"{path}: {name} sees no network (permissions.can_use_network is not granted)"]
