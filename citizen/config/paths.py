"""Every path Experience uses, derived from one root.

`CIV_ROOT` (default `/home`) holds `shared/` and one home per citizen; the demo and
the tests point it at a temporary directory. Nothing else in the code base builds
a path under the root by hand.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from citizen.errors import ConfigError, WrongUser
from shared.identity import server_mode
from shared.layout import Layout

DEFAULT_ROOT = "/home"
# Citizen names become Unix user names and path components: keep them to what
# useradd accepts and what can never climb out of the root ("../x", "a/b").
NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
# Where a server install keeps the venv and the one shared copy of the model.
SERVER_PREFIX = Path("/opt/experience")


def commons_layout() -> Layout:
    """The commons' own paths (`shared.layout`), under this civilization's root: the one
    place `citizen` learns where a thing of the commons lives."""
    return Layout(shared_dir())


def civ_root() -> Path:
    """The root of the civilization: `$CIV_ROOT`, else `/home`."""
    return Path(os.environ.get("CIV_ROOT") or DEFAULT_ROOT)


def shared_dir() -> Path:
    """The commons (`CIV_ROOT/shared`)."""
    return civ_root() / "shared"


def check_name(name: str) -> str:
    """Return `name` if it is a valid citizen name.

    :raises ConfigError: it is not (names become Unix users and directory names).
    """
    if not NAME_RE.match(name):
        raise ConfigError(
            "citizen name",
            name,
            "not a valid citizen name",
            "use 1-31 lowercase letters, digits, '-' or '_', starting with a letter",
        )
    return name


def citizen_home(name: str) -> Path:
    """A citizen's home (`CIV_ROOT/<name>`)."""
    return civ_root() / check_name(name)


def citizen_config_file(name: str) -> Path:
    """The citizen's own config, which overrides its template once it exists."""
    return citizen_home(name) / "config.json"


def citizen_env_file(name: str) -> Path:
    """The citizen's secrets in dev mode (`.env`, mode 0600)."""
    return citizen_home(name) / ".env"


def operator_dir() -> Path:
    """Where a server keeps what the operator governs (`$EXPERIENCE_OPERATOR_DIR`, else
    /etc/experience): root-owned, outside every home, so no citizen can rewrite it."""
    return Path(os.environ.get("EXPERIENCE_OPERATOR_DIR") or "/etc/experience")


def civilization_file() -> Path:
    """The operator's word that this server is one of several (citizen.broker.database
    reads it; a citizen's process only asks whether it is there): 0644, no secret in it."""
    return operator_dir() / "civilization.json"


def operator_rules_file(name: str) -> Path:
    """A citizen's operator-governed settings (budget, endpoints, mail, permissions)."""
    return operator_dir() / f"{check_name(name)}.json"


def operator_secrets_file(name: str) -> Path:
    """A citizen's secrets on a server (root-owned 0600; its unit passes them in)."""
    return operator_dir() / f"{check_name(name)}.env"


def operator_mail_file(name: str) -> Path:
    """Where an older install kept a citizen's mailbox apart for its daemon; setup merges
    it back into `operator_secrets_file` (the broker alone logs in to the mailbox now)."""
    return operator_dir() / f"{check_name(name)}.mail.env"


@cache  # resolving stats each folder up to / (ten stats): `templates()` asks per citizen
def project_dir() -> Path:
    """The checkout this code runs from (a citizen's `~/code` on a server)."""
    return Path(__file__).resolve().parents[2]  # citizen/config/paths.py -> the checkout


def templates_dir() -> Path:
    """Templates and prompts shipped with the code (`$EXPERIENCE_TEMPLATES` overrides)."""
    override = os.environ.get("EXPERIENCE_TEMPLATES")
    return Path(override) if override else project_dir() / "templates"


def rules_dir() -> Path:
    """Where the operator's rule files come from - `citizen_configs.json` (caps,
    permissions, endpoints, mail) and `models.json` (prices) with their schemas:
    `$EXPERIENCE_RULES_DIR` (the citizen's unit sets the root-owned release's
    templates there, so its own `~/code/templates` changes no rule), else the templates."""
    override = os.environ.get("EXPERIENCE_RULES_DIR")
    return Path(override) if override else templates_dir()


def model_cache_dir() -> Path:
    """The one directory holding the embedded model's weights, shared by every citizen and test.

    `$EXPERIENCE_MODEL_DIR` if set; the server's `/opt/experience/models` when it exists;
    otherwise the user's cache directory. Never per civilization or per test: the file
    is 253 MB.
    """
    override = os.environ.get("EXPERIENCE_MODEL_DIR")
    if override:
        return Path(override)
    server = SERVER_PREFIX / "models"
    if server.is_dir():
        return server
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "experience" / "models"


@dataclass(frozen=True)
class Home:
    """Every path of one citizen: its home, and its corners of the commons."""

    name: str
    dir: Path

    @property
    def config(self) -> Path:
        return self.dir / "config.json"

    @property
    def env(self) -> Path:
        return self.dir / ".env"

    @property
    def code(self) -> Path:
        return self.dir / "code"

    @property
    def contexts(self) -> Path:
        return self.dir / "contexts"

    @property
    def tasks(self) -> Path:
        return self.dir / "tasks"

    @property
    def memory(self) -> Path:
        return self.dir / "memory"

    @property
    def wake_logs(self) -> Path:
        return self.dir / "logs" / "wakes"

    @property
    def state(self) -> Path:
        """Wake counters that must survive restarts."""
        return self.dir / "state.json"

    @property
    def daemon_lock(self) -> Path:
        return self.dir / ".daemon.lock"

    @property
    def heartbeat(self) -> Path:
        return commons_layout().heartbeat(self.name)

    @property
    def doorbell(self) -> Path:
        return commons_layout().doorbell(self.name)


def home(name: str) -> Home:
    """The paths of citizen `name`."""
    return Home(name, citizen_home(name))


def require_owner(h: Home) -> None:
    """Refuse to act in a citizen's home as a different user (root included).

    Files root wrote there would be unreadable to the citizen's own daemon.

    :raises WrongUser: the home belongs to someone else.
    """
    if h.dir.is_dir() and h.dir.stat().st_uid != os.geteuid():
        raise WrongUser(f"{h.dir} belongs to another user: run this as the citizen "
                        f"(sudo -u {h.name} citizen …)")


# The broker (citizen.broker): on a server its socket is in systemd's RuntimeDirectory for
# the broker's user and its state (ledger, mail state) in its StateDirectory (0700); in
# dev mode both are under the civilization root. The environment overrides either (tests).
BROKER_SOCKET_ENV, BROKER_STATE_ENV = "EXPERIENCE_BROKER_SOCKET", "EXPERIENCE_BROKER_STATE"
SERVER_BROKER_SOCKET = Path("/run/experience-broker/broker.sock")
SERVER_BROKER_STATE = Path("/var/lib/experience-broker")


def broker_state() -> Path:
    """The broker's own directory: its ledger, mail state, onboarding requests."""
    override = os.environ.get(BROKER_STATE_ENV)
    if override:
        return Path(override)
    return SERVER_BROKER_STATE if server_mode(shared_dir()) else civ_root() / ".broker"


def broker_socket() -> Path:
    """The broker's Unix socket, where every citizen's model call and request goes."""
    override = os.environ.get(BROKER_SOCKET_ENV)
    if override:
        return Path(override)
    if server_mode(shared_dir()):
        return SERVER_BROKER_SOCKET
    return civ_root() / ".broker" / "broker.sock"


def web_token() -> Path:
    """The operator's web token (`citizen web --token`): on a server root's
    /etc/experience/web.token, readable by the web service's group; in dev mode
    CIV_ROOT/.web/token, the developer's."""
    return operator_dir() / "web.token" if server_mode(shared_dir()) else \
        civ_root() / ".web" / "token"
