"""Errors raised by the citizen package.

Each specific error also subclasses the matching built-in, so callers can catch
either, and each message names the fix. Exceptions never log: the caller decides.
"""

from __future__ import annotations

from pathlib import Path


class CitizenError(Exception):
    """Base class of every error the citizen package raises on purpose."""


class ConfigError(CitizenError, ValueError):
    """A configuration or template file is missing, malformed or inconsistent."""

    def __init__(self, path: Path | str, key: str, problem: str, fix: str) -> None:
        self.path = Path(path)
        self.key = key
        self.problem = problem
        self.fix = fix
        where = f"{self.path}" + (f", key '{key}'" if key else "")
        super().__init__(f"{where}: {problem} - {fix}")


class LimitReached(CitizenError):
    """A limit was reached: what would cross it was not done (a call not made, a debate
    not opened, a mail not sent). Its message names the limit and when it frees up.

    The wake's dollar cap and the daily caps (`citizen.wake.meter.BudgetExceeded`,
    `citizen.home.spend.DailyCapReached`), a count a day (`citizen.home.spend.CapReached`),
    and the broker's caps and rates (`citizen.broker.ledger.CapExceeded`,
    `citizen.broker.mailstate.Limited`).
    """


class ProviderError(CitizenError, RuntimeError):
    """The model provider could not produce a reply (after its own retries)."""


class ProviderUnavailable(ProviderError):
    """The provider cannot be used here at all (missing package, model or key)."""


class StructuredOutputError(CitizenError, ValueError):
    """A model reply did not match the JSON schema it was asked for.

    Carries the raw text and the validation problem, so the caller can hand both back
    to the model as an observation and retry within its budget.
    """

    def __init__(self, problem: str, raw: str) -> None:
        self.problem = problem
        self.raw = raw
        # What the reply cost, when the provider knows (the call was made and billed);
        # None: unknown, and the meter charges the call's worst case.
        self.cost_usd: float | None = None
        self.tokens_in = 0
        self.tokens_out = 0
        super().__init__(f"model output does not match its schema: {problem}")

    def billed(self, cost_usd: float, tokens_in: int, tokens_out: int) -> StructuredOutputError:
        """The same error, knowing what its reply cost."""
        self.cost_usd, self.tokens_in, self.tokens_out = cost_usd, tokens_in, tokens_out
        return self


class WrongUser(CitizenError, PermissionError):
    """A command would write into a citizen's home as another user."""


class ReplayMismatch(ProviderError):
    """A replayed request differs from the recorded one, or the recording ran out."""
