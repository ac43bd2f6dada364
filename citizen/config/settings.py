"""The one config module: loads and validates every template and citizen config.

Sources, in order of precedence for a citizen:
1. `/etc/experience/<name>.json` - what the operator governs (budgets, model endpoints,
   mail addresses and allow-lists, permissions, approval counts), root-owned;
2. `CIV_ROOT/<name>/config.json` - the citizen's own config, once it has a home. On a
   server (the commons belongs to group `citizens`) only CITIZEN_KEYS count there: a
   citizen's model can write its home, so nothing it must not change may live there;
3. its entry in `templates/citizen_configs.json`, merged over that file's `defaults`.

Every file is validated when loaded. A bad file raises `ConfigError` naming the
file, the key and the fix - never a traceback from deep inside the code that
later uses the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1
CONTEXT_TYPES = (
    "identity", "history", "goals", "relationships", "skills", "dreams", "working", "peer_monitor",
)
MANDATORY_SLOTS = {0: "REFLECT", 1: "LIBRARY", 4: "DRY_AUDIT", 7: "PEER_MONITOR"}
OWN_SLOTS = (2, 3, 5, 6, 8, 9)
PROVIDERS = ("auto", "anthropic", "local", "replay")
# What a citizen may set for itself on a server; every other key is the operator's.
CITIZEN_KEYS = ("focus", "strengths", "stream_bid")

FIX_RESTORE = "compare with the shipped file (`git diff -- templates/`) or restore it"

@dataclass(frozen=True)
class CouncilSeat:
    """One model in a citizen's council: the tier (`role`) it serves and its temperature."""

    model: str
    role: str
    temperature: float


@dataclass(frozen=True)
class Budget:
    """Limits enforced before a call would exceed them: per wake, and the prompt's size
    per kind of call (citizen.wake.prompt)."""

    max_usd_per_wake: float
    max_iterations: int
    max_output_tokens: int
    # Tokens of system prompt + contexts: the tool loop's calls, and structured steps
    # (votes, moves, bids). The contexts' caps add up to ≈214k; these keep a call small.
    prompt_tokens_execute: int = 24000
    prompt_tokens_step: int = 4000
    # The tool loop's conversation: past this the oldest tool results are dropped.
    conversation_tokens: int = 40000
    # Dollars per UTC day (citizen.home.spend): this citizen, and all citizens together. An
    # hourly citizen at its wake cap could spend $24 a day; these stop that at $10 / $30.
    max_usd_per_day: float = 10.0
    civilization_usd_per_day: float = 30.0
    # Enforced by the broker (citizen.broker), which holds the key: the citizen's month,
    # and how fast and how many at once its calls may go, so no one starves its peers.
    max_usd_per_month: float = 200.0
    max_calls_per_minute: int = 60
    max_concurrent_calls: int = 4
    # Work a citizen may start, so one runaway model cannot flood its peers: wakes rung
    # by the doorbell per hour (more wait for the window), debates and proposals it opens
    # per UTC day, and the seed's model calls per task (then it ends `failed`, saying so).
    max_doorbell_wakes_per_hour: int = 12
    max_debates_per_day: int = 3
    max_proposals_per_day: int = 5
    max_calls_per_task: int = 50
    # CODE, DEBUG and RESEARCH slots with no task that may improve the citizen's own code
    # toward its goals, per UTC day (citizen.wake.types.self_directed); beyond, idle at $0.
    max_self_directed_wakes_per_day: int = 1
    max_usd_per_debate: float = 0.5  # the seed's target: past it the debate ends, saying so
    # What its home may hold on disk, in MiB: measured by root's timer (citizen.admin.disk),
    # which stops the citizen's unit past it - the citizen cannot change either.
    max_home_mb: int = 2048


@dataclass(frozen=True)
class LLMSettings:
    """Which provider a citizen uses and where to reach it."""

    provider: str
    local_url: str = ""
    anthropic_base_url: str = ""


@dataclass(frozen=True)
class MailSettings:
    """Who may give a citizen tasks by mail, and the limits of its mailbox."""

    allowed_senders: tuple[str, ...]
    max_message_mb: float
    max_attachment_mb: float
    poll_seconds: float
    idle: bool
    processed_folder: str
    quarantine_folder: str
    max_sends_per_hour: int


@dataclass(frozen=True)
class WebSettings:
    """The web the operator opens to a citizen's tools (citizen.tools.web)."""

    # A SearXNG instance's search endpoint (`GET <url>?q=...&format=json`); "" offers no
    # web_search. The operator's: on a server only `/etc/experience/<name>.json` sets it,
    # since its host is reachable even when private (the operator chose it).
    search_url: str = ""
    # Hosts (names or addresses) the web tools may reach although they resolve to loopback
    # or private addresses. The operator's alone, as search_url: a citizen's environment,
    # its own config.json or ~/code/templates never open one (the rules come from the release).
    allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class EvolutionSettings:
    """How a citizen's REVIEW wakes test a peer's change (citizen.tools.code)."""

    # What "test it" runs (bash, in the peer-code sandbox, in a scratch tree of the change);
    # "" runs the project's suite (code.TEST_COMMAND). The operator's alone, as web.*: a
    # citizen that chose its own would choose what its peers' reports say ("true").
    test_command: str = ""
    # How many peers the broker draws to review each change this citizen announces
    # (shared.change_rules.REVIEWERS by default; the schema keeps it at 2 or more, the
    # seed's matching reports). The operator's, as test_command: an author choosing its
    # own k would choose how many must agree.
    reviewers: int = 3


@dataclass(frozen=True)
class LogSettings:
    """Wake-log retention (citizen.home.retention), in world days; operator-owned on a server."""

    full_days: float = 14.0  # kept whole: `citizen logs`, replays
    keep_days: float = 90.0  # kept gzipped until then, then deleted


@dataclass(frozen=True)
class CitizenConfig:
    """A citizen's validated configuration."""

    name: str
    email: str
    focus: str
    strengths: tuple[str, ...]
    council: tuple[CouncilSeat, ...]
    context_limits: Mapping[str, int]
    permissions: Mapping[str, bool]
    budget: Budget
    wake_interval_minutes: float
    library_approvals: int
    llm: LLMSettings
    mail: MailSettings
    source: Path
    debate_budgets: Mapping[str, tuple[int, int]] | None = None
    stream_bid: str = "auto"
    logs: LogSettings = LogSettings()
    web: WebSettings = WebSettings()
    evolution: EvolutionSettings = EvolutionSettings()

    def seat(self, tier: str) -> CouncilSeat:
        """The council seat serving `tier`; the primary seat when no seat has that role."""
        for seat in self.council:
            if seat.role == tier:
                return seat
        return next(s for s in self.council if s.role == "primary")


@dataclass(frozen=True)
class ModelPrice:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_write: float
    cache_read: float


@dataclass(frozen=True)
class LocalModelSettings:
    """The embedded model's limits."""

    model: str
    context_tokens: int
    max_output_tokens: int
    threads: int
    max_concurrent_generations: int
    # How long a request to an `llm.local_url` server may take, queueing included, before
    # the call fails (ProviderError): the operator's, beside the server's slots above.
    request_timeout_s: float = 300.0


@dataclass(frozen=True)
class RoleValues:
    """A Thought World role's value weights and the bounds they may move within."""

    weights: Mapping[str, float]
    bounds: Mapping[str, tuple[float, float]]
