"""The visible text of an HTML page - for a fetched page (`web_fetch`) and an HTML mail
alike. Scripts and styles are dropped; nothing here runs or follows anything."""

from __future__ import annotations

from html.parser import HTMLParser


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
