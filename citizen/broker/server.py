"""The broker's socket: who is calling (from the kernel), and the Messages API on it.

HTTP/1.1 on a Unix socket, one thread per connection. Routes:
- `POST /v1/messages` - checked, reserved, forwarded with the operator's key, settled;
- `POST /v1/messages/count_tokens` - forwarded (the upstream does not bill it);
- `GET /v1/experience/whoami` - the caller's name, provider, caps and spending today;
- `POST /v1/experience/permit` - a wake permit, held while the connection stays open
  (citizen.broker.permits); `/v1/messages` refuses a citizen holding none;
- `GET /v1/experience/views/...` - the dashboard's read-only views (citizen.broker.views),
  served to no citizen.

Refusals use the Messages API's error shape, so the real SDK raises them as it would
the API's: 402 `budget_exceeded` (a cap; not retried), 403 `permission_error` (not a
citizen, or a model outside its council), 429 `rate_limit_error` with `retry-after`
(its own rate or concurrency - the SDK backs off), 400 for what cannot be bounded.
"""

from __future__ import annotations

import json
import logging
import socketserver
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from citizen.access.permit import PATH as PERMIT_PATH
from citizen.broker import estimate, identity
from citizen.broker.database import Database
from citizen.broker.ledger import CIVILIZATION, CapExceeded, Ledger, LedgerUnavailable
from citizen.broker.limits import Limiter
from citizen.broker.permits import Permits, serve
from citizen.broker.refused import Refused
from citizen.broker.rings import Rings
from citizen.broker.rules import CallerRules, RuleCache
from citizen.broker.upstream import Answer, Broken, Unreachable, Upstreams
from citizen.broker.wire import DOWN_HEADERS, MAX_BODY, Wire
from citizen.errors import ConfigError
from shared.identity import peer_uid

__all__ = ["MAX_BODY", "ROUTES", "VIEWS", "Broker", "Handler", "Serving", "route"]
log = logging.getLogger(__name__)
PURPOSE_HEADER = "x-experience-purpose"  # data for the ledger's purpose column
# Headers passed up; everything else (the caller's x-api-key above all) stays.
_UP_HEADERS = ("content-type", "accept", "anthropic-version", "anthropic-beta")


@dataclass(frozen=True)
class _Allowance:
    calls_per_minute: int
    concurrent: int


ROUTE_ALLOWANCE = _Allowance(calls_per_minute=240, concurrent=8)  # per citizen, all routes
# The commons of several servers (citizen.broker.commons): a wake reads a thread's
# records and its gate asks what is owed, each a call where one server reads its files -
# a bucket of its own, so the commons never takes mail's or the repositories' calls.
COMMONS_ALLOWANCE = _Allowance(calls_per_minute=6000, concurrent=8)

# (method, path) -> handler(broker, citizen, request body) -> (status, JSON-able answer).
# Modules that give the broker more to do (mail, onboarding, the shared repositories)
# add theirs with `route` and are imported by citizen.broker.service.
Handler_ = Callable[["Broker", str, bytes], tuple[int, Any]]
ROUTES: dict[tuple[str, str], Handler_] = {}
ALLOWANCES: dict[tuple[str, str], _Allowance] = {}  # a route's bucket, when not ROUTE_ALLOWANCE
# GET path -> view(broker, the caller's uid, query string) -> (status, JSON-able answer):
# the dashboard's reads (citizen.broker.views). Their callers are not citizens, so
# `caller` is not asked; the view decides from the kernel's uid alone.
View_ = Callable[["Broker", int, str], tuple[int, Any]]
VIEWS: dict[str, View_] = {}


def route(method: str, path: str, *, commons: bool = False) -> Callable[[Handler_], Handler_]:
    """Register a JSON route under /v1/experience/ (the caller is already identified;
    a handler raises `Refused` to refuse). `commons`: counted in COMMONS_ALLOWANCE."""
    if not path.startswith("/v1/experience/"):
        raise ValueError(f"{path}: broker routes live under /v1/experience/")

    def add(handler: Handler_) -> Handler_:
        ROUTES[(method, path)] = handler
        if commons:
            ALLOWANCES[(method, path)] = COMMONS_ALLOWANCE
        return handler

    return add


@dataclass
class Broker:
    """The broker's state: ledger, rules, per-citizen limits and the upstream client."""

    ledger: Ledger
    server_mode: bool
    rules: RuleCache = field(default_factory=RuleCache)
    limiter: Limiter = field(default_factory=Limiter)
    route_limiter: Limiter = field(default_factory=Limiter)
    commons_limiter: Limiter = field(default_factory=Limiter)
    upstreams: Upstreams = field(default_factory=Upstreams)
    permits: Permits = field(default_factory=Permits)
    last_active: float = field(default_factory=time.monotonic)
    # A civilization on several servers: the shared database (citizen.broker.database),
    # None on a server of its own (the commons is its files).
    database: Database | None = None
    rings: Rings | None = None  # the rings its LISTEN heard for its citizens (rings.py)

    def caller(self, uid: int, claimed: str | None) -> str:
        """The citizen a connection speaks for (citizen.broker.identity)."""
        return identity.caller(uid, claimed, server_mode=self.server_mode)

    def rules_for(self, citizen: str) -> CallerRules:
        try:
            return self.rules.get(citizen)
        except ConfigError as exc:  # the operator's file is broken: say so, call nothing
            raise Refused(500, "api_error", f"the broker cannot read {citizen}'s rules: "
                          f"{exc}") from exc


class Serving(socketserver.BaseServer):
    """A server whose handlers reach the broker (`citizen.broker.listener.Server`)."""

    broker: Broker


class Handler(Wire):
    """One connection and its routes."""

    server: Serving

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path in VIEWS:
            self._view(VIEWS[path], query)
            return
        self._serve(self._whoami if path == "/v1/experience/whoami"
                    else self._extra("GET", path))

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        route = {"/v1/messages": self._messages, PERMIT_PATH: self._permit,
                 "/v1/messages/count_tokens": self._count}.get(path)
        self._serve(route or self._extra("POST", path))

    def _extra(self, method: str, path: str) -> Any:
        """A route another module added (`route`): JSON in, JSON out."""
        handler = ROUTES.get((method, path))
        if handler is None:
            return None

        broker = self.server.broker
        allowance = ALLOWANCES.get((method, path))
        limiter = broker.route_limiter if allowance is None else broker.commons_limiter

        def serve(citizen: str) -> None:
            # Their own bucket (not the model calls'): a mail long-poll must not take a
            # model slot, and no citizen may flood these routes either.
            with limiter.hold(citizen, allowance or ROUTE_ALLOWANCE):
                body = self._body() if method == "POST" else b""
                status, data = handler(self.server.broker, citizen, body)
            self._json(status, data)

        return serve

    def _serve(self, route: Any) -> None:
        self._body_read = False
        broker = self.server.broker
        broker.last_active = time.monotonic()
        try:
            if route is None:
                raise Refused(404, "not_found_error", f"the broker has no {self.path}")
            citizen = broker.caller(peer_uid(self.connection),
                                    self.headers.get(identity.CITIZEN_HEADER))
            route(citizen)
        except Refused as exc:
            self._error(exc)
        finally:
            broker.last_active = time.monotonic()

    def _view(self, view: View_, query: str) -> None:
        """A dashboard view: no citizen is named; `view` refuses every uid but its own."""
        self._body_read = False
        try:
            self._json(*view(self.server.broker, peer_uid(self.connection), query))
        except Refused as exc:
            self._error(exc)

    # ------------------------------------------------------------ routes

    def _whoami(self, citizen: str) -> None:
        broker = self.server.broker
        rules = broker.rules_for(citizen)
        self._json(200, {
            "citizen": citizen,
            "provider": "anthropic" if rules.upstream else "local",
            "models": sorted(rules.prices),
            "caps": rules.caps.__dict__,
            "spent_today_usd": round(broker.ledger.spent(citizen), 6),
            # What a wake's first cap check needs: one figure, not every peer's ledger.
            "civilization_spent_today_usd": round(broker.ledger.spent(CIVILIZATION), 6)})

    def _count(self, citizen: str) -> None:
        rules = self.server.broker.rules_for(citizen)
        upstream = _upstream(rules, citizen)
        with self.server.broker.limiter.hold(citizen, rules):
            raw = self._body()  # under the hold: a citizen's bodies in memory are bounded
            resp = self._send_up("/v1/messages/count_tokens", raw, upstream.api_key,
                                 upstream.base_url)
            try:
                body = resp.read()
            except Broken:
                raise Refused(502, "api_error", "the upstream's answer was cut") from None
            finally:
                resp.close()
        self._reply(resp.status, body, resp.headers)

    def _permit(self, citizen: str) -> None:
        """A wake permit, held while this connection is open (citizen.broker.permits);
        in the routes' bucket, so one citizen's connections to wait on are bounded."""
        with self.server.broker.route_limiter.hold(citizen, ROUTE_ALLOWANCE):
            self._body()  # nothing is asked of it: left unread, it would read as a close
            serve(self.server.broker.permits, citizen, self.connection, self._held)

    def _held(self) -> None:
        """The head of a permit's answer: its lines follow until the connection ends."""
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _messages(self, citizen: str) -> None:
        broker = self.server.broker
        broker.permits.check(citizen, peer_uid(self.connection))  # first: nothing is read
        rules = broker.rules_for(citizen)
        with broker.limiter.hold(citizen, rules):  # before the body: see _count
            raw = self._body()
            try:
                call = estimate.parse(raw)
                estimate.check_betas(self.headers.get_all("anthropic-beta") or [])
                estimate.check_version(self.headers.get("anthropic-version"))
            except estimate.Unbounded as exc:
                raise Refused(400, "invalid_request_error", f"{exc} - refused by the broker") \
                    from exc
            price = rules.prices.get(call.model)
            if price is None:
                raise Refused(403, "permission_error",
                              f"{call.model} is not one of {citizen}'s council models "
                              f"({', '.join(sorted(rules.prices))}); the operator's "
                              f"/etc/experience/{citizen}.json decides them")
            upstream = _upstream(rules, citizen)
            call_id = self._reserve(citizen, rules, call, raw, price)
            started = time.monotonic()
            try:
                resp = self._send_up("/v1/messages", call.wire, upstream.api_key,
                                     upstream.base_url)
            except Refused:
                broker.ledger.release(call_id, 502)  # never reached the upstream: no bill
                raise
            except Broken:
                broker.ledger.charge_reserved(call_id, 502)  # sent, answer lost: worst case
                raise Refused(502, "api_error", "the upstream did not answer") from None
            try:
                self._relay(call_id, call, resp, price)
            finally:
                resp.close()
                log.info("%s %s %d in %.0f ms", citizen, call.model, resp.status,
                         (time.monotonic() - started) * 1000)

    # ------------------------------------------------------------ steps

    def _reserve(self, citizen: str, rules: CallerRules, call: estimate.Call, raw: bytes,
                 price: Any) -> int:
        ledger = self.server.broker.ledger
        purpose = "".join(c for c in self.headers.get(PURPOSE_HEADER, "") if c.isprintable())
        try:
            return ledger.reserve(citizen, call.model, estimate.worst_usd(len(raw), call, price),
                                  rules.caps, purpose)
        except LedgerUnavailable as exc:  # several servers, the database down: it waits
            raise Refused(503, "overloaded_error", str(exc), {"retry-after": "30"}) from None
        except PermissionError as exc:  # spend.NotHere: the database says not this server's
            raise Refused(403, "permission_error", str(exc)) from None
        except CapExceeded as first:
            # The bytes over-count tokens several times: ask the exact count (free), and
            # try once more with it before refusing.
            exact = self._input_tokens(rules, citizen, call)
            if exact is not None:
                try:
                    return ledger.reserve(citizen, call.model,
                                          estimate.worst_usd(exact, call, price),
                                          rules.caps, purpose)
                except CapExceeded as second:
                    raise Refused(402, "budget_exceeded", str(second)) from None
            raise Refused(402, "budget_exceeded", str(first)) from None

    def _input_tokens(self, rules: CallerRules, citizen: str,
                      call: estimate.Call) -> int | None:
        upstream = _upstream(rules, citizen)
        try:
            resp = self._send_up("/v1/messages/count_tokens", estimate.count_body(call),
                                 upstream.api_key, upstream.base_url)
        except (Refused, Broken):
            return None
        try:
            body = resp.read()
        except Broken:
            return None
        finally:
            resp.close()
        if resp.status != 200:
            return None
        try:
            count = json.loads(body).get("input_tokens")
        except (ValueError, AttributeError):
            return None
        return count if isinstance(count, int) and count >= 0 else None

    def _send_up(self, path: str, raw: bytes, key: str, base_url: str) -> Answer:
        """:raises Refused: not reached (nothing sent). :raises Broken: sent, no answer."""
        headers = {k: v for k in _UP_HEADERS if (v := self.headers.get(k))}
        headers["x-api-key"] = key  # the operator's key: added here, never seen by a caller
        try:
            return self.server.broker.upstreams.post(base_url, path, raw, headers)
        except Unreachable as exc:
            raise Refused(502, "api_error", f"the broker cannot reach its upstream: {exc}") from exc

    def _relay(self, call_id: int, call: estimate.Call, resp: Answer, price: Any) -> None:
        ledger = self.server.broker.ledger
        if resp.status != 200:
            try:
                body = resp.read()
            except Broken:
                body = b'{"type": "error", "error": {"type": "api_error", "message": "cut"}}'
            ledger.release(call_id, resp.status)  # an error is not billed
            self._reply(resp.status, body, resp.headers)
            return
        if not call.stream:
            try:
                body = resp.read()
            except Broken:
                ledger.charge_reserved(call_id, 502)
                raise Refused(502, "api_error", "the upstream's answer was cut") from None
            usage = estimate.usage_of(body)
            if usage is None:
                ledger.charge_reserved(call_id, 200)  # no usage said: the worst case
            else:
                ledger.settle(call_id, estimate.cost_usd(usage, price), usage, 200)
            self._reply(200, body, resp.headers)
            return
        self._stream(call_id, resp, price)

    def _stream(self, call_id: int, resp: Answer, price: Any) -> None:
        """Pass the events through as they come; settle from what they said."""
        tracker = estimate.StreamUsage()
        self.send_response(200)
        for key in DOWN_HEADERS:
            if key in resp.headers:
                self.send_header(key, resp.headers[key])
        self.send_header("Connection", "close")  # the end of the body is the end of it
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in resp.chunks():
                tracker.feed(chunk)
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:  # Broken included: either side went away; settled below
            pass
        usage = tracker.usage
        if tracker.finished and usage is not None:
            self.server.broker.ledger.settle(call_id, estimate.cost_usd(usage, price),
                                             usage, 200)
        else:
            self.server.broker.ledger.charge_reserved(call_id, 200)


def _upstream(rules: CallerRules, citizen: str) -> Any:
    if rules.upstream is None:
        raise Refused(403, "permission_error",
                      f"no model key is configured for {citizen} - the operator puts "
                      f"ANTHROPIC_API_KEY in /etc/experience/{citizen}.env (dev mode: its "
                      ".env)")
    return rules.upstream
