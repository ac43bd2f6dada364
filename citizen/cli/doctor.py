"""`citizen doctor`: check config, paths, permissions and the model, and say what to fix."""

from __future__ import annotations

import json
import pwd
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from citizen import config, mail
from citizen.access import client
from citizen.admin.onboard import BROKER_USER
from citizen.broker import service
from citizen.cli.options import citizen_option, json_option, provider_option, resolve_name
from citizen.cli.terminal import command, echo
from citizen.config import paths
from citizen.errors import CitizenError
from citizen.llm import choose, make_provider
from citizen.llm.base import Request
from citizen.mail import link
from citizen.tools import ToolFailure, sandbox, web
from citizen.wake.flow import call_outside_wake
from shared.identity import server_mode

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: str
    detail: str


def _mode_problem(path: Path, forbidden: int, want: str) -> str:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & forbidden:
        return f"{path} has mode {mode:04o} - run: chmod {want} {path}"
    return ""


def _check_paths(name: str) -> list[Check]:
    root = paths.civ_root()
    checks: list[Check] = []
    home = paths.citizen_home(name)
    if not home.is_dir():
        checks.append(Check("civilization", WARN if root != Path(paths.DEFAULT_ROOT) else OK,
                            f"{home} does not exist yet: no civilization initialised under "
                            f"{root}; using defaults from {paths.templates_dir()}"))
        return checks
    problems = [p for p in (
        # Homes are 0750: group `citizens` may read (peer monitoring), nobody else.
        _mode_problem(home, stat.S_IWOTH | stat.S_IROTH, "750"),
    ) if p]
    env = paths.citizen_env_file(name)
    if config.server_mode():
        secrets = paths.operator_secrets_file(name)
        if env.exists() or env.is_symlink():
            problems.append(f"{env} exists: on a server secrets live in {secrets} (the "
                            "citizen can write its home) - run setup_server.sh again")
        elif secrets.exists():
            # the broker's alone (its user, 0600): no process of a citizen reads the key
            problems += [p for p in [_mode_problem(secrets, 0o077, "600")] if p]
            owner = secrets.stat().st_uid
            try:
                broker = pwd.getpwnam(BROKER_USER).pw_uid
            except KeyError:
                broker = 0  # an install before the broker: root's
            if owner != broker:
                problems.append(f"{secrets} must belong to {BROKER_USER} - run "
                                "scripts/setup_server.sh again")
    elif env.exists():
        # .env holds the API key and mail password: owner only.
        problems += [p for p in [_mode_problem(env, 0o077, "600")] if p]
        if env.stat().st_uid != home.stat().st_uid:
            problems.append(f"{env} is not owned by the citizen who owns {home} - run: chown "
                            f"--reference={home} {env}")
    shared = paths.shared_dir()
    if shared.is_dir():
        # The commons is group-writable for `citizens`, never world-writable.
        problems += [p for p in [_mode_problem(shared, stat.S_IWOTH, "3775")] if p]
    checks.append(Check("paths", FAIL if problems else OK,
                        "; ".join(problems) or f"{home} and its .env have safe modes"))
    if server_mode(shared):
        checks.append(Check("identity", OK, "server mode: every record in the commons is "
                            "checked against its file's owner"))
    else:
        checks.append(Check("identity", OK, "dev mode (one Unix user): identity checks of "
                            "commons records are off"))
    return checks


def _sandbox_check() -> Check:
    """Can commands run in bubblewrap here? On a server they must."""
    mode, why = sandbox.mode(), sandbox.problem()
    if mode == "off":
        return Check("sandbox", WARN, f"{sandbox.MODE_ENV}=off: commands run UNCONFINED "
                     "(development only)")
    if not why:
        return Check("sandbox", OK, f"bubblewrap confines every command ({sandbox.MODE_ENV}="
                     f"{mode})")
    if mode == "required" or config.server_mode():
        return Check("sandbox", FAIL, f"{why} - commands are refused until it can run")
    return Check("sandbox", WARN, f"{why} - commands run unconfined in dev mode; set "
                 f"{sandbox.MODE_ENV}=required to refuse them instead")


def _budget_check(cfg: config.CitizenConfig, tpl: config.Templates) -> Check:
    """Can one uncached call with every context at its cap fit in the wake budget?"""
    seat = cfg.seat("primary")
    price = tpl.prices[seat.model]
    tokens = sum(cfg.context_limits.values())
    worst = tokens * max(price.input, price.cache_write) / 1e6
    budget = cfg.budget.max_usd_per_wake
    if worst <= budget:
        return Check("budget", OK, f"contexts at their caps ({tokens} tokens) cost at most "
                     f"${worst:.2f} per uncached call on {seat.model}; wake budget ${budget:.2f}")
    return Check("budget", WARN, f"contexts at their caps ({tokens} tokens) would cost "
                 f"${worst:.2f} per uncached call on {seat.model}, over the ${budget:.2f} wake "
                 "budget: such wakes will stop before calling - lower context_limits or raise "
                 "budget.max_usd_per_wake")


def _mail_check(name: str, secrets: config.Secrets) -> Check:
    """The broker logs in to IMAP and SMTP when the citizen has a mailbox (no process
    of ours holds the password)."""
    if not mail.configured(secrets):
        return Check("mail", OK, "no mailbox configured (IMAP_SERVER, SMTP_SERVER, EMAIL_USER, "
                     "EMAIL_PASS in its secrets)")
    try:
        got = link.check(name)
    except mail.MailNotConfigured as exc:
        return Check("mail", OK, str(exc))
    except mail.MailError as exc:
        return Check("mail", FAIL, str(exc))
    senders = int(got["operators"])
    sending = (f"{got['sent_last_hour']} of {got['max_sends_per_hour']} sends this hour"
               if got["can_send"] else "sending not permitted (permissions.can_send_email)")
    return Check("mail", OK, f"{got['address']}: IMAP {got['imap']} and SMTP {got['smtp']} "
                 f"logins work (by the broker); {senders} operator "
                 f"address{'es' if senders != 1 else ''} may send tasks; {sending}")


def _broker_check() -> Check:
    """The broker holds the keys and the caps: every model call goes through it."""
    sock = paths.broker_socket()
    if client.reachable(sock):
        return Check("broker", OK, f"answering at {sock}; ledger {service.ledger_path()}")
    if config.server_mode():
        return Check("broker", FAIL, f"not answering at {sock} - systemctl start "
                     "experience-broker (journalctl -u experience-broker says why it stopped)")
    return Check("broker", OK, f"not running yet: the first model call starts it at {sock}")


def _search_check(cfg: config.CitizenConfig) -> Check:
    """The operator's search backend (`web.search_url`): unset, answering, or failing."""
    url = cfg.web.search_url
    if not url:
        return Check("search", OK, f"no search backend: web_search is not offered (the "
                     f"operator sets {web.SEARCH_KEY} to a SearXNG instance's /search URL, "
                     f"its json format enabled, in {paths.operator_rules_file(cfg.name)})")
    if not cfg.permissions.get("can_use_network", False):
        return Check("search", FAIL, f"{web.SEARCH_KEY} is {url} but web_search refuses "
                     f"without the network: set permissions.can_use_network to true in "
                     f"{cfg.source} (then `{command(f'onboard {cfg.name}')}` on a server)")
    try:
        found = web.search(url, "experience")
    except ToolFailure as exc:
        return Check("search", FAIL, f"{exc} - check that the instance runs and answers "
                     f"{url}?q=test&format=json, or correct {web.SEARCH_KEY} in {cfg.source}")
    return Check("search", OK, f"{url} answers ({len(found)} results for a test query)")


def run_checks(name: str | None, provider: str | None) -> list[Check]:
    """Every check, in order; stops early only when later checks cannot run."""
    checks: list[Check] = []
    try:
        tpl = config.templates()
        checks.append(Check("templates", OK, f"{tpl.dir}: {len(tpl.citizen_names())} citizens "
                            f"({', '.join(tpl.citizen_names())}), {len(tpl.wake_types)} wake "
                            "types, values for 3 roles"))
        name = resolve_name(name)
        cfg = config.load_citizen(name)
        checks.append(Check("citizen", OK, f"{name} from {cfg.source}"))
        checks += _check_paths(name)
        checks.append(_sandbox_check())
        checks.append(_broker_check())
        secrets = config.load_secrets(name)
        choice = choose(cfg, secrets, provider or "")
        checks.append(Check("provider", OK, f"{choice.name} ({choice.reason})"))
        if choice.name == "anthropic":
            checks.append(_budget_check(cfg, tpl))
        checks.append(_mail_check(name, secrets))
        checks.append(_search_check(cfg))
    except CitizenError as exc:
        checks.append(Check("config", FAIL, str(exc)))
        return checks
    try:
        llm = make_provider(cfg, secrets, provider or "")
        checks.append(Check("model", OK, llm.describe()))
        prompt = tpl.prompt("doctor")
        reply = call_outside_wake(name, "DOCTOR", llm, Request(
            messages=[{"role": "user", "content": prompt}], max_tokens=8, tier="fast",
            purpose="doctor"))
    except CitizenError as exc:
        checks.append(Check("model call", FAIL, str(exc)))
        return checks
    u = reply.usage
    checks.append(Check(
        "model call", OK,
        f"{reply.model}: {reply.latency_s:.2f} s, {u.input_tokens} tokens in, {u.output_tokens} "
        f"out, ${reply.cost_usd:.6f}; replied {reply.text.strip()[:40]!r}"))
    return checks


@click.command()
@citizen_option
@provider_option
@json_option
def doctor(name: str | None, provider: str | None, as_json: bool) -> None:
    """Check config, paths, permissions and the model with one tiny real call.

    Exits non-zero when any check fails. Works before any civilization exists
    (it then uses the defaults in templates/).

    \b
    Examples:
      citizen doctor
      citizen doctor --citizen mira --provider local
      citizen doctor --json
    """
    checks = run_checks(name, provider)
    failed = any(c.status == FAIL for c in checks)
    if as_json:
        echo(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]},
                              indent=2))
    else:
        for c in checks:
            echo(f"{c.status:>4}  {c.name:<12} {c.detail}")
        echo("doctor: " + ("FAILED - fix the lines marked FAIL" if failed else "all good"))
    if failed:
        raise SystemExit(1)
