"""Web tools: fetch a page as text; search a SearXNG instance the operator configured
(`web.search_url` in its rules: citizen.config.WebSettings). Private hosts the operator
opens are its `web.allow`, never the process environment."""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psutil

from citizen.config import paths
from citizen.tools.base import ToolEnv, ToolFailure, tool
from shared.webtext import html_to_text

MAX_BYTES = 500_000
TIMEOUT_S = 20
# What one search may put in front of the model: a few results, each field clipped.
MAX_RESULTS = 8
MAX_QUERY_CHARS = 400
FIELD_CHARS = {"title": 200, "url": 500, "snippet": 400}
SEARCH_KEY = "web.search_url"  # the operator's setting (citizen.config.WebSettings)
# Hosts the operator opens although they resolve to loopback or private addresses. Not
# the environment (the daemon a citizen may rewrite sets its own): the operator's file.
ALLOW_KEY = "web.allow"
# Set only while a web tool runs: the hosts its citizen's operator opens, and where.
_OPENED: ContextVar[tuple[frozenset[str], str]] = ContextVar(
    "opened", default=(frozenset(), "the operator's rules"))


@contextmanager
def _operator_opens(env: ToolEnv) -> Iterator[None]:
    where = str(paths.operator_rules_file(env.config.name))
    token = _OPENED.set((frozenset(env.config.web.allow), where))
    try:
        yield
    finally:
        _OPENED.reset(token)


def search_endpoint(url: str) -> tuple[str, int]:
    """The search backend's one host and port, from the operator's `web.search_url`.

    :raises ToolFailure: the setting is not one http(s) URL with a host.
    """
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if parts.scheme not in ("http", "https") or not parts.hostname or not port \
            or parts.username or parts.password or parts.query or parts.fragment:
        raise ToolFailure(f"{SEARCH_KEY}={url!r} is not one http(s) URL with a host; "
                          "the operator sets it like http://search.example:8080/search")
    return parts.hostname.lower(), port


# Set only while web_search runs: the search backend's host is open on its one port, to
# that tool alone (web_fetch, or a page's redirect to another port, reaches nothing there).
_SEARCHING: ContextVar[tuple[str, int] | None] = ContextVar("searching", default=None)


def local_addresses() -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address of this machine's own interfaces (its public ones included)."""
    found: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    found.add(ipaddress.ip_address(addr.address.split("%", 1)[0]))
                except ValueError:
                    continue
    return found


def _public_address(host: str, port: int) -> str:
    """The address to connect to for `host`: resolved once, every answer checked.

    A page (or a prompt-injected model) must not reach the daemon's own machine or
    network: loopback, private, link-local, multicast, unspecified and reserved addresses
    are refused in any spelling (the resolver turns `2130706433` or `0x7f.1` into
    127.0.0.1), IPv4-mapped IPv6 by the address it maps.

    :raises ToolFailure: the host does not resolve, or resolves to an address not public.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ToolFailure(f"could not resolve {host}: {exc}") from exc
    addresses = [str(info[4][0]) for info in infos]
    opened, where = _OPENED.get()
    if host.lower() in opened or _SEARCHING.get() == (host.lower(), port):
        return addresses[0]  # the operator's choice: this host (the search backend: this port)
    fix = f"the operator may open it in {ALLOW_KEY} of {where}"
    own = local_addresses()
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        mapped = getattr(ip, "ipv4_mapped", None)
        if not (mapped or ip).is_global or (mapped or ip).is_multicast:
            raise ToolFailure(f"{host} resolves to {text}, which is not a public address; "
                              f"{fix}")
        # The machine's own public address reaches its services as loopback would.
        if ip in own or (mapped is not None and mapped in own):
            raise ToolFailure(f"{host} resolves to {text}, an address of this machine; {fix}")
    return addresses[0]


class _Pinned(http.client.HTTPConnection):
    """Connects to the checked address of its host (a second lookup could answer another)."""

    def connect(self) -> None:
        address = _public_address(self.host, self.port)
        self.sock = socket.create_connection((address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def connect(self) -> None:
        address = _public_address(self.host, self.port)
        sock = socket.create_connection((address, self.port), self.timeout)
        self.sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)


class _HTTP(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_Pinned, req)


class _HTTPS(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_PinnedTLS, req)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """A redirect is a new request: its scheme is checked here, its host at connect."""

    def redirect_request(  # noqa: PLR0917 - urllib's signature
            self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
            newurl: str) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise ToolFailure(f"refused a redirect to {newurl}: only http and https")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


# No proxy handler: a proxy from the environment would connect on our behalf, unchecked.
_OPENER = urllib.request.OpenerDirector()
for _handler in (_HTTP(), _HTTPS(), _Redirects(), urllib.request.HTTPErrorProcessor(),
                 urllib.request.HTTPDefaultErrorHandler()):
    _OPENER.add_handler(_handler)


def _get(url: str) -> tuple[bytes, str]:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ToolFailure("only http and https URLs can be fetched")
    req = urllib.request.Request(url, headers={"User-Agent": "experience-citizen/0.1"})  # noqa: S310
    try:
        with _OPENER.open(req, timeout=TIMEOUT_S) as resp:
            return resp.read(MAX_BYTES), resp.headers.get_content_type()
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise ToolFailure(f"could not fetch {url}: {exc}") from exc


def _network_allowed(env: ToolEnv) -> None:
    """The operator's `permissions.can_use_network` governs the web tools as the shell."""
    if not env.config.permissions.get("can_use_network", False):
        raise ToolFailure(f"{env.home.name} may not use the network: the operator sets "
                          f"permissions.can_use_network to true in {env.config.source}")


@tool(reads=True)  # the world changes its result: never cached
def web_fetch(env: ToolEnv, url: str) -> str:
    """Fetch a web page (or text file) and return its text.

    :param url: an http or https URL
    """
    _network_allowed(env)
    with _operator_opens(env):
        body, ctype = _get(url)
    text = body.decode("utf-8", errors="replace")
    return html_to_text(text) if ctype == "text/html" else text


def search(url: str, query: str) -> list[dict[str, str]]:
    """Ask the SearXNG instance at `url` (its JSON API) for `query`: at most MAX_RESULTS
    results of title, url and snippet, each clipped (`citizen doctor` asks it too).

    :raises ToolFailure: the backend is unreachable, refuses, or answers no SearXNG JSON.
    """
    endpoint = search_endpoint(url)
    # Why: the operator named this host and port, so it is reachable even when private -
    # for this request alone (a redirect elsewhere is checked as any fetch is).
    token = _SEARCHING.set(endpoint)
    try:
        body, _ = _get(f"{url}?{urllib.parse.urlencode({'q': query, 'format': 'json'})}")
    except ToolFailure as exc:
        hint = (" - enable `json` in the instance's settings.yml (search: formats)"
                if "403" in str(exc) else "")
        raise ToolFailure(f"the search backend ({SEARCH_KEY}) failed: {exc}{hint}") from exc
    finally:
        _SEARCHING.reset(token)
    try:
        results = json.loads(body)["results"]
        if not isinstance(results, list):
            raise TypeError("results is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolFailure(f"the search backend at {url} did not answer SearXNG's JSON "
                          f"({type(exc).__name__}: {str(exc)[:100]})") from exc
    return [_result(r) for r in results if isinstance(r, dict)][:MAX_RESULTS]


def _result(raw: dict[str, Any]) -> dict[str, str]:
    got = {"title": raw.get("title"), "url": raw.get("url"), "snippet": raw.get("content")}
    return {k: (v if isinstance(v, str) else "")[:FIELD_CHARS[k]] for k, v in got.items()}


@tool(reads=True)  # the world changes its result: never cached
def web_search(env: ToolEnv, query: str) -> str:
    """Search the web; returns up to 8 results, each a title, a URL and a snippet.

    :param query: what to search for
    """
    _network_allowed(env)
    url = env.config.web.search_url
    if not url:
        raise ToolFailure(f"no search backend is configured: the operator sets {SEARCH_KEY} "
                          f"in {env.config.source}")
    if not query.strip() or len(query) > MAX_QUERY_CHARS:
        raise ToolFailure(f"the query must be 1 to {MAX_QUERY_CHARS} characters")
    with _operator_opens(env):
        results = search(url, query)
    if not results:
        return f"no results for {query!r}"
    return json.dumps(results, ensure_ascii=False, indent=1)
