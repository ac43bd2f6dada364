"""Configuration: the operator's templates and rules, a citizen's own settings, its
secrets, the paths of a civilization, and the schemas the model's answers must meet.

- `settings`: what a citizen's configuration holds (dataclasses, no I/O);
- `files`: reading and validating one file; `templates`: the templates directory;
- `loading`: one citizen's layered configuration, and the operator's other rules;
- `secrets`: the `.env` values (dev mode) - never the broker's credentials on a server;
- `paths`: where everything lives; `schemas`: the model's output schemas.

Owns reading `templates/` (the release's, on a server), `/etc/experience` and a home's
`config.json`; writes no store. May import `citizen.errors` and `shared` only: every
other package of `citizen` is above it. `citizen.config.X` is the public API below.
"""

from citizen.config.loading import load_budget, load_citizen, medium_programs, server_mode
from citizen.config.secrets import SECRET_KEYS, Secrets, load_secrets, parse_env, secrets_file
from citizen.config.settings import (
    CITIZEN_KEYS,
    CONTEXT_TYPES,
    MANDATORY_SLOTS,
    OWN_SLOTS,
    PROVIDERS,
    SCHEMA_VERSION,
    Budget,
    CitizenConfig,
    CouncilSeat,
    LLMSettings,
    LocalModelSettings,
    LogSettings,
    MailSettings,
    ModelPrice,
    RoleValues,
    WebSettings,
)
from citizen.config.templates import Templates, templates

__all__ = [
    "CITIZEN_KEYS", "CONTEXT_TYPES", "MANDATORY_SLOTS", "OWN_SLOTS", "PROVIDERS",
    "SCHEMA_VERSION", "SECRET_KEYS", "Budget", "CitizenConfig", "CouncilSeat", "LLMSettings",
    "LocalModelSettings", "LogSettings", "MailSettings", "ModelPrice", "RoleValues",
    "Secrets", "Templates", "WebSettings", "load_budget", "load_citizen", "load_secrets",
    "medium_programs", "parse_env", "secrets_file", "server_mode", "templates",
]
