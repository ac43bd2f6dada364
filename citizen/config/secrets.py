"""A citizen's secrets: where they are read from, and the object that holds them.

On a server a citizen's process reads none: `/etc/experience/<name>.env` is the
broker's (the model key, the mailbox), and its unit passes no credential. Root's CLI
reads that file; in dev mode every process reads the home's `.env`; the process
environment overrides either. The mailbox password (`BROKER_ONLY`) is the broker's
alone even then: a `Secrets` never holds it, so no daemon, wake or tool does. A
`Secrets` never shows its values in a repr, and redacts them from any text as the last
line of defence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from citizen.config import paths
from citizen.config.loading import server_mode
from citizen.errors import ConfigError

# Secrets that must never reach prompts, logs or tool subprocesses.
SECRET_KEYS = ("ANTHROPIC_API_KEY", "EMAIL_PASS", "ANTHROPIC_AUTH_TOKEN")
# Read by the broker alone (citizen.broker.mailbox), never kept in a `Secrets`: the
# daemon gets messages from the broker, not the means to log in.
BROKER_ONLY = ("EMAIL_PASS",)
MIN_SECRET = 6  # shorter values are redacted nowhere: they would match ordinary words


@dataclass(frozen=True)
class Secrets:
    """A citizen's secrets: from its `.env` file, overridden by the process environment.

    The repr never shows values, so a Secrets object cannot leak into a log by accident.
    """

    values: Mapping[str, str] = field(default_factory=dict)
    # BROKER_ONLY values a dev-mode process could read anyway (one Unix user): never
    # handed out by `get`, only redacted. On a server the file is unreadable: none.
    redact_only: Mapping[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str:
        """The secret's value, or "" when it is not set."""
        return self.values.get(key, "")

    def __repr__(self) -> str:
        return f"Secrets(keys={sorted(self.values)})"

    def redact(self, text: str) -> str:
        """`text` with every secret value replaced by its name: the last line of defence
        for what reaches a model, a log or a mail (a hard link to `.env`, a tool that
        prints its environment)."""
        for key, value in self._redacted:
            if value in text:
                text = text.replace(value, f"[{key} redacted]")
        return text

    @property
    def redactor(self) -> Callable[[str], str]:
        """`redact`, or `str` itself when there is nothing to redact (a server's wake
        holds no secret): a wake log then writes its events without walking each one."""
        return self.redact if self._redacted else str

    @cached_property
    def _redacted(self) -> tuple[tuple[str, str], ...]:
        """(name, value) of each secret `redact` replaces, found once: a wake log passes
        every string of every event through `redact` (hundreds a wake)."""
        pairs = ((key, self.values.get(key, "") or self.redact_only.get(key, ""))
                 for key in SECRET_KEYS)
        return tuple((key, value) for key, value in pairs if len(value) >= MIN_SECRET)


def web_token_in(text: str) -> str:
    """The operator's web token in the text of its file (`paths.web_token()`): comment
    lines, then the token; "" when it holds none."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[-1] if lines else ""


def parse_env(path: Path) -> dict[str, str]:
    """Parse a `.env` file: `KEY=VALUE` lines, `#` comments, optional quotes.

    :raises ConfigError: a line is not `KEY=VALUE`.
    """
    out: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(path, f"line {lineno}", "not a KEY=VALUE line",
                              "write one KEY=VALUE per line (no spaces around the key)")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def secrets_file(name: str) -> Path | None:
    """Where citizen `name`'s secrets are read from, if anywhere readable.

    On a server: root's `/etc/experience/<name>.env` (the broker's; only root's CLI can
    read it - a citizen's process reads no secrets at all). Never the home's `.env` on
    a server: the citizen writes it. In dev mode, the home's `.env`.
    """
    path = paths.operator_secrets_file(name) if server_mode() else paths.citizen_env_file(name)
    return path if path.is_file() and os.access(path, os.R_OK) else None


def values(name: str | None = None) -> dict[str, str]:
    """Everything in `secrets_file` overridden by the process environment, the mailbox
    password included: for the dev-mode broker, which reads what its developer's files
    say (a server's broker reads its own file: citizen.broker.mailbox)."""
    found: dict[str, str] = {}
    if name is not None:
        env_file = secrets_file(name)
        if env_file is not None:
            found.update(parse_env(env_file))
    found.update({k: v for k, v in os.environ.items() if k in found or k in ENV_KEYS})
    return {k: v for k, v in found.items() if v}


def load_secrets(name: str | None = None) -> Secrets:
    """A citizen's secrets (`values`) without what only the broker reads (`BROKER_ONLY`)."""
    found = values(name)
    return Secrets({k: v for k, v in found.items() if k not in BROKER_ONLY},
                   {k: v for k, v in found.items() if k in BROKER_ONLY})


# What a dev-mode broker serves every citizen with from its own environment (the
# endpoint, keys, mailbox): a client whose environment differs restarts it
# (citizen.access.client.ensure).
BROKER_ENV_KEYS = (*SECRET_KEYS, "IMAP_SERVER", "SMTP_SERVER", "EMAIL_USER", "IMAP_TLS",
                   "SMTP_TLS", "ANTHROPIC_BASE_URL")
ENV_KEYS = (*BROKER_ENV_KEYS, "EXPERIENCE_PROVIDER", "EXPERIENCE_LOCAL_URL")
