"""Web tools: fetch a page as text; search only when a search backend is configured."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from html.parser import HTMLParser

from citizen.tools.base import ToolEnv, ToolFailure, tool

MAX_BYTES = 500_000
TIMEOUT_S = 20
SEARCH_URL_ENV = "EXPERIENCE_SEARCH_URL"  # a SearXNG-style JSON endpoint, e.g. http://host/search


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in ("script", "style", "noscript"):
            self.skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "noscript") and self.skip:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip and data.strip():
            self.parts.append(data.strip())


def html_to_text(html: str) -> str:
    """The visible text of an HTML document, one line per text node."""
    parser = _Text()
    parser.feed(html)
    return "\n".join(parser.parts)


def _get(url: str) -> tuple[bytes, str]:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ToolFailure("only http and https URLs can be fetched")
    req = urllib.request.Request(url, headers={"User-Agent": "experience-citizen/0.1"})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - scheme checked
            return resp.read(MAX_BYTES), resp.headers.get_content_type()
    except (OSError, ValueError) as exc:
        raise ToolFailure(f"could not fetch {url}: {exc}") from exc


@tool
def web_fetch(env: ToolEnv, url: str) -> str:
    """Fetch a web page (or text file) and return its text.

    :param url: an http or https URL
    """
    body, ctype = _get(url)
    text = body.decode("utf-8", errors="replace")
    return html_to_text(text) if ctype == "text/html" else text


def search_configured() -> bool:
    return bool(os.environ.get(SEARCH_URL_ENV))


@tool
def web_search(env: ToolEnv, query: str) -> str:
    """Search the web; returns titles, URLs and snippets.

    :param query: what to search for
    """
    base = os.environ.get(SEARCH_URL_ENV, "")
    body, _ = _get(f"{base}?{urllib.parse.urlencode({'q': query, 'format': 'json'})}")
    try:
        results = json.loads(body).get("results", [])[:8]
    except (json.JSONDecodeError, AttributeError) as exc:
        raise ToolFailure(f"the search backend answered something that is not JSON: {exc}") from exc
    return json.dumps([{k: r.get(k) for k in ("title", "url", "content")} for r in results])
