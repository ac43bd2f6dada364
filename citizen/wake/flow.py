"""The wake: the one flow every wake runs, whoever starts it (daemon or operator).

next action → gate → load contexts → select tools → route → execute → save contexts.
The gate comes before any model call and before the provider is even built: an
idle wake makes zero model calls and never imports a model SDK. Contexts are
saved in `finally`; if that save fails, an emergency dump keeps them.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from citizen import civilization, config, mail
from citizen.access import client
from citizen.config import paths
from citizen.errors import CitizenError, ProviderError
from citizen.home import spend, state
from citizen.home.contexts import ContextStore
from citizen.home.memory import Memory
from citizen.home.spend import Daily, DailyCapReached
from citizen.home.tasks import TaskQueue
from citizen.home.wakelog import NOT_WAKES, WakeLog
from citizen.llm import make_provider
from citizen.llm.base import Provider, Reply, Request
from citizen.mail import configured as mail_configured
from citizen.mail.outbox import notice
from citizen.tools import core_tools
from citizen.tools.base import Tool, ToolEnv
from citizen.tools.dynamic import dynamic_tools
from citizen.wake import bootstrap, prompt
from citizen.wake import types as wakes
from citizen.wake.loop import run as run_loop
from citizen.wake.meter import Meter
from citizen.wake.selection import offer, route
from citizen.wake.types.base import Setup
from citizen.wake.verifier import Verifier
from shared.atomic import CorruptFile

log = logging.getLogger(__name__)

ProviderFactory = Callable[[config.CitizenConfig, config.Secrets], Provider]


class WakeRefused(CitizenError, RuntimeError):
    """A wake could not even start (the citizen has no home)."""


@dataclass
class WakeResult:
    """How a wake ended."""

    number: int
    wake_type: str
    status: str  # ok, idle, skipped, failed, interrupted, or how the loop ended (budget, …)
    reason: str
    cost_usd: float
    calls: int
    log_path: Path
    task: str | None = None  # the task the wake worked on, and its state after it
    task_state: str | None = None
    model_answered: bool | None = None  # None: no model call was made

    @property
    def failed(self) -> bool:
        """The wake did not do its work: it failed, its task failed, or the model was asked
        and never answered - what `citizen wake` exits 1 on, so a script can tell."""
        return (self.status in ("failed", "provider_error")
                or self.task_state in ("failed", "stuck")
                or self.model_answered is False)


def _default_provider(cfg: config.CitizenConfig, secrets: config.Secrets) -> Provider:
    return make_provider(cfg, secrets)


def run_wake(name: str, *, wake_type: str | None = None, number: int | None = None,
             slot: int | None = None, reason: str = "",
             provider: ProviderFactory = _default_provider) -> WakeResult:
    """Run one wake of citizen `name`.

    With no `wake_type`, this is a scheduled wake: the next slot number picks the type.
    """
    home = paths.home(name)
    if not home.dir.is_dir():
        raise WakeRefused(f"citizen {name} has no home at {home.dir} - create it with "
                          f"`citizen init` (or `citizen onboard {name}` on a server)")
    paths.require_owner(home)
    cfg = config.load_citizen(name)
    tpl = config.templates()
    if number is None:
        number, slot = state.allocate(home, scheduled=wake_type is None)
    if wake_type is None:
        wake_type = tpl.wake_slots(name)[(slot or 0) % 10]
    wlog = _opened(home, number, wake_type, slot, reason)
    started = time.monotonic()
    meter = Meter(wlog, cfg.budget, ledger=home, daily=daily_caps(home, cfg, wlog),
                  routes={seat.role: seat.model for seat in cfg.council})
    status, why = "failed", ""
    run = _Run(name, home, cfg, tpl, wake_type, number, wlog, meter, provider)
    try:
        status, why = run.flow()
    except KeyboardInterrupt:
        status, why = "interrupted", "stopped before it finished (second SIGTERM or Ctrl-C)"
        raise
    except Exception as exc:  # any bug ends this wake, recorded; the daemon lives on
        notes = "".join(f" ({n})" for n in getattr(exc, "__notes__", ()))  # e.g. which tool
        status, why = "failed", f"{type(exc).__name__}: {exc}{notes}"
        wlog.event("error", error=why, traceback=traceback.format_exc())
        # The traceback is in the wake log; on the terminal only with -vv (debug).
        log.error("wake %d of %s failed: %s", number, name, why,
                  exc_info=log.isEnabledFor(logging.DEBUG))
    finally:
        _close(wlog, meter, status, why, started)
    return WakeResult(number, wake_type, status, why, meter.spent, meter.calls, wlog.path,
                      task=run.task_id, task_state=run.task_state,
                      model_answered=meter.calls > 0 if meter.attempts else None)


def daily_caps(home: paths.Home, cfg: config.CitizenConfig, wlog: WakeLog | None) -> Daily:
    """The daily caps this citizen's calls are checked against (citizen.home.spend)."""
    def warn(message: str) -> None:
        log.warning("%s", message)
        if wlog is not None:
            wlog.event("daily_cap_warning", message=message)
        tell_operators(home, cfg, f"[experience] {home.name} is near its daily budget",
                       message + "\n\nSee: citizen cost --days 7; citizen status\n")

    peers = [paths.home(n) for n in civilization.citizens() if n != home.name]
    return Daily(home, cfg.budget.max_usd_per_day, cfg.budget.civilization_usd_per_day,
                 peers, warn, civilization=lambda: client.civilization_spent(home.name))


@contextmanager
def outside_wake(name: str, kind: str) -> Iterator[Meter]:
    """A meter for model calls outside wakes (memory roll-ups): logged like a wake of
    type `kind`, added to the spend ledger, under the daily caps."""
    if kind not in NOT_WAKES:  # else the wake table would count an operator's call as a wake
        raise ValueError(f"{kind} is not a kind of call outside a wake ({sorted(NOT_WAKES)})")
    home = paths.home(name)
    cfg = config.load_citizen(name)
    number, _ = state.allocate(home, scheduled=False)
    wlog = WakeLog(home, number, kind)
    wlog.event("wake_start", citizen=name, type=kind, slot=None, pid=os.getpid(),
               reason="model calls outside a wake")
    meter = Meter(wlog, cfg.budget, ledger=home, daily=daily_caps(home, cfg, wlog),
                  routes={seat.role: seat.model for seat in cfg.council})
    status, started = "failed", time.monotonic()
    try:
        yield meter
        status = "ok"
    finally:
        _close(wlog, meter, status, "", started)


def call_outside_wake(name: str, kind: str, llm: Provider, request: Request) -> Reply:
    """One call by an operator's command (`citizen ask`, `citizen doctor`): metered in the
    citizen's ledger and under its caps when the caller owns the home; root on a server
    writes nothing into a home it does not own (and there is none before `init`)."""
    home = paths.home(name)
    if home.dir.is_dir() and home.dir.stat().st_uid == os.geteuid():
        with outside_wake(name, kind) as meter:
            return meter.call(llm, request)
    return llm.complete(request)


def gate_here(name: str, *, number: int, slot: int | None, wake_type: str | None,
              reason: str) -> WakeResult | None:
    """The gate alone, in the caller's process - the daemon's, before it starts a wake
    process (issue 33: idle wakes start no process). None when the wake has work: nothing
    is written, and the wake process runs it, gate and all (its verdict is the one that
    counts). Else the idle (or skipped) wake, logged as `run_wake` logs one: the same
    events and fields, under the number the caller allocated."""
    started = time.monotonic()
    verdict = gate_only(name, number=number, slot=slot, wake_type=wake_type)
    if verdict is None:
        return None
    wake_type, status, why = verdict
    wlog = _opened(paths.home(name), number, wake_type, slot, reason)
    wlog.event("gate", verdict="idle" if status == "idle" else "skip", reason=why)
    _close(wlog, None, status, why, started)
    return WakeResult(number, wake_type, status, why, 0.0, 0, wlog.path)


def gate_only(name: str, *, number: int, slot: int | None, wake_type: str | None
              ) -> tuple[str, str, str] | None:
    """The gate's verdict and nothing written: None when the wake has work, else its
    type, "idle" or "skipped", and why. The server's scheduler asks it as a peer may
    read a home (daemon/scheduled.py) and logs an idle wake in its own store."""
    home = paths.home(name)
    tpl = config.templates()
    if wake_type is None:
        wake_type = tpl.wake_slots(name)[(slot or 0) % 10]
    kind, _, gate = _gate(home, config.load_citizen(name), tpl, wake_type, number)
    if kind is not None and gate.work:
        return None
    return wake_type, ("idle" if kind is not None else "skipped"), gate.reason


def _opened(home: paths.Home, number: int, wake_type: str, slot: int | None,
            reason: str) -> WakeLog:
    """A wake's log, its first event written."""
    wlog = WakeLog(home, number, wake_type)
    wlog.event("wake_start", citizen=home.name, type=wake_type, slot=slot, pid=os.getpid(),
               reason=reason or ("slot" if slot is not None else "requested"))
    return wlog


def _gate(home: paths.Home, cfg: config.CitizenConfig, tpl: config.Templates,
          wake_type: str, number: int
          ) -> tuple[wakes.WakeType | None, Setup | None, wakes.Gate]:
    """The wake type, what it sees and its gate's verdict (no type registered: None and
    why)."""
    kind = wakes.get(wake_type)
    if kind is None:
        why = (f"wake type {wake_type} is not available yet: no module registers it "
               f"(registered: {', '.join(wakes.registered())})")
        return None, None, wakes.Gate(False, why)
    setup = Setup(home, cfg, tpl, TaskQueue(home.tasks), Memory(home.memory), number,
                  state.load(home)["marks"])
    return kind, setup, kind.gate(setup)


def _close(wlog: WakeLog, meter: Meter | None, status: str, why: str, started: float) -> None:
    """The log's last event - what the wake (or the calls outside one) cost - made durable."""
    wlog.event("wake_end", status=status, reason=why,
               cost_usd=round(meter.spent, 6) if meter else 0.0,
               calls=meter.calls if meter else 0, tokens_in=meter.tokens_in if meter else 0,
               tokens_out=meter.tokens_out if meter else 0,
               duration_s=round(time.monotonic() - started, 3))
    wlog.close()


def tell_operators(home: paths.Home, cfg: config.CitizenConfig, subject: str,
                   body: str) -> None:
    """Mail the operators (mail.allowed_senders), if this citizen has mail."""
    operators = cfg.mail.allowed_senders
    try:
        secrets = config.load_secrets(home.name)
    except CitizenError:
        return
    if operators and mail.configured(secrets):
        notice(home, operators, subject, body)


@dataclass
class _Run:
    """One wake in progress."""

    name: str
    home: paths.Home
    cfg: config.CitizenConfig
    tpl: config.Templates
    wake_type: str
    number: int
    wlog: WakeLog
    meter: Meter
    provider: ProviderFactory
    _calls_before: int = 0  # the meter's count when the task was taken
    task_id: str | None = None  # the task this wake took, and its state when it ended
    task_state: str | None = None

    def flow(self) -> tuple[str, str]:
        kind, setup, gate = _gate(self.home, self.cfg, self.tpl, self.wake_type, self.number)
        if kind is None or setup is None:
            self.wlog.event("gate", verdict="skip", reason=gate.reason)
            return "skipped", gate.reason
        tasks, memory = setup.tasks, setup.memory
        self.wlog.event("gate", verdict="work" if gate.work else "idle", reason=gate.reason)
        if not gate.work:
            return "idle", gate.reason
        try:
            if self.meter.daily is not None:
                self.meter.daily.check(spend.LEAST_CALL_USD)
        except DailyCapReached as exc:  # nothing is claimed: the work waits for tomorrow
            self.wlog.event("daily_cap", reason=str(exc))
            return "daily_cap", str(exc)
        secrets = config.load_secrets(self.name)
        self.wlog.redact = secrets.redactor  # from here on, no known secret is logged
        try:
            llm = self.provider(self.cfg, secrets)
        except ProviderError as exc:  # no key, no model: the operator's to fix, not a crash
            self.wlog.event("provider_unavailable", reason=str(exc))
            return "failed", str(exc)
        self.wlog.event("provider", provider=llm.describe())
        store = ContextStore(self.home.contexts, self.cfg.context_limits, llm.count_tokens,
                             keep_views=True)
        try:
            contexts = store.load_all()
        except CorruptFile as exc:
            self.wlog.event("contexts_corrupt", path=str(exc.path), problem=exc.problem)
            return "failed", str(exc)
        env = ToolEnv(self.home, self.cfg, secrets, tasks, memory, contexts, log=self.wlog,
                      verify=Verifier(llm, self.meter, self.tpl, secrets.redact))
        try:
            return self._work(kind, setup, gate, env, llm=llm, store=store)
        finally:
            try:
                forgotten = store.save_all(contexts)
                self.wlog.event("contexts_saved", forgotten=forgotten)
            except Exception as exc:  # noqa: BLE001 - whatever broke the save, keep the contexts
                dump = store.emergency_dump(contexts, repr(exc))
                self.wlog.event("contexts_emergency_dump", path=str(dump), error=repr(exc))

    def _work(self, kind: wakes.WakeType, setup: Setup, gate: wakes.Gate, env: ToolEnv, *,
              llm: Provider, store: ContextStore) -> tuple[str, str]:
        try:
            instruction = kind.begin(setup, gate, env)
        except CorruptFile as exc:
            self.wlog.event("task_corrupt", path=str(exc.path), problem=exc.problem)
            return "failed", str(exc)
        if env.task is not None:
            self.wlog.event("task", id=env.task.id, transition="claimed",
                            attempt=env.task.attempts,
                            deliverables=env.task.meta.get("deliverables"))
            self.task_id, self.task_state = env.task.id, env.task.status
            # The seed's calls per task, across all its wakes (counted in the task).
            used = int(env.task.meta.get("calls", 0))
            self.meter.calls_left = self.cfg.budget.max_calls_per_task - used
            self._calls_before = self.meter.calls
        contexts = env.contexts
        self.wlog.event("contexts", tokens={t: store.tokens(c) for t, c in contexts.items()})
        budget = self.cfg.budget
        # The shared block first (the same bytes for every citizen), then the citizen's.
        shared, own = self.tpl.system_prompt(self.name, self.cfg.focus, budget)
        tools: dict[str, Tool] = {}
        if kind.loop:
            tools = {**dynamic_tools(self.cfg),  # core tools win any name clash
                     **core_tools(mail=mail_configured(env.secrets),
                                  code=(self.home.code / ".git").exists(),
                                  search=bool(self.cfg.web.search_url))}
            # Only what the operator permits is offered (Tool.run refuses the rest anyway).
            tools = {n: t for n, t in tools.items() if t.allowed(self.cfg)}
        orient = kind.loop and bootstrap.due(setup.marks)
        if orient:  # within the budget below: it is part of the base this once
            own += "\n\n" + bootstrap.orientation(self.tpl, self.cfg, self.home, tools)
            self.wlog.event("orientation", first=True)
        # Built once: the same bytes on every call of the wake, so the cache serves them.
        purpose = "execute" if kind.loop else "step"
        limit = budget.prompt_tokens_execute if kind.loop else budget.prompt_tokens_step
        # What the memory holds about this work (FTS5), if the budget has room for it.
        recall = prompt.recalled(setup.memory.search(prompt.keywords(instruction),
                                                     limit=prompt.RECALL_HITS))
        system, shown = prompt.system_blocks((shared, own), contexts, limit, purpose,
                                             llm.count_tokens, recall=recall)
        # The stable blocks, cached as long as the gap to the next wake calls for.
        stable = prompt.stable_count(shown, lead=2)
        ttl = prompt.cache_ttl(self.cfg.wake_interval_minutes)
        self.wlog.event("prompt_budget", purpose=purpose, shown=shown, budget=limit,
                        stable=stable, cache_ttl=ttl)
        ask = wakes.Ask(llm, self.meter, system, stable, ttl)
        if not kind.loop:
            ending = kind.act(setup, gate, env, ask)
            return self._ended(kind, setup, env, ending)
        left = kind.steps(setup, gate, env, ask, instruction)
        if not isinstance(left, str):  # the steps did all the work, or a limit stopped them
            return self._ended(kind, setup, env, left)
        instruction = left
        chosen, method = offer(llm, self.meter, self.tpl, tools, instruction,
                               required=kind.required_tools)
        self.wlog.event("tools_chosen", tools=chosen, method=method)
        tier, how = route(llm, self.meter, self.tpl, instruction, self.wake_type,
                          seats=[seat.role for seat in self.cfg.council])
        # The seat's model; which model answered is each llm_call's `model`.
        self.wlog.event("route", tier=tier, route_model=self.cfg.seat(tier).model, method=how)
        ending = run_loop(llm, self.meter, env, {n: tools[n] for n in chosen}, system=system,
                          instruction=instruction, tier=tier, stable=stable,
                          cache_ttl=ttl, shared=1)
        if orient:  # the loop ended with it seen; a crash before here orients again
            bootstrap.done(self.home, self.number)
        return self._ended(kind, setup, env, ending)

    def _ended(self, kind: wakes.WakeType, setup: Setup, env: ToolEnv,
               ending: wakes.Ending) -> tuple[str, str]:
        contexts = env.contexts
        self.wlog.event("loop_end", status=ending.status, reason=ending.reason,
                        text=ending.text[:1000])
        if env.task is not None:
            env.task.meta["calls"] = (int(env.task.meta.get("calls", 0))
                                      + self.meter.calls - self._calls_before)
        summary = kind.end(setup, env, ending)
        if env.task is not None:
            self.wlog.event("task", id=env.task.id, transition=env.task.status, summary=summary)
            self.task_state = env.task.status
        setup.memory.record(self.number, self.wake_type,
                            f"{self.wake_type} wake {self.number}: {summary}")
        contexts["history"].add(f"Wake {self.number} ({self.wake_type}): {summary[:300]}")
        if ending.status in ("end_turn", "task_finished"):
            return "ok", summary
        return ending.status, f"{ending.reason} ({summary})"
