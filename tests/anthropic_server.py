"""A local HTTP server that speaks the Anthropic Messages API, for provider tests.

This imitates the API itself - the one part we cannot reach here - and nothing
else: the real SDK talks to it over real HTTP. Each test queues the responses it
wants (`reply`, `error`) and reads back the requests the SDK actually sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.prompt_cache import CacheRequestError, Counted, PromptCache

API_KEY = "sk-ant-test-key"


@dataclass
class Exchange:
    """A queued response."""

    status: int
    body: dict[str, Any] | None  # None is sent as `null`: a responder with nothing to say
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def message(content: list[dict[str, Any]], *, model: str = "claude-haiku-4-5",
            stop_reason: str = "end_turn", input_tokens: int = 100, output_tokens: int = 20,
            cache_write: int = 0, cache_read: int = 0,
            cache_write_1h: int = 0) -> dict[str, Any]:
    """A Messages API response body (`cache_write_1h`: the part of `cache_write` written
    with the 1-hour lifetime)."""
    return {
        "id": "msg_test", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read,
                  "cache_creation": {"ephemeral_5m_input_tokens": cache_write - cache_write_1h,
                                     "ephemeral_1h_input_tokens": cache_write_1h}},
    }


def text(value: str, **kw: Any) -> dict[str, Any]:
    """A response with one text block."""
    return message([{"type": "text", "text": value}], **kw)


def tool_use(name: str, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A response asking for one tool call."""
    return message([{"type": "tool_use", "id": "toolu_1", "name": name, "input": payload}],
                   stop_reason="tool_use", **kw)


def no_deliverables() -> dict[str, Any]:
    """The answer to a TASK wake's first call (what the task must leave behind), when the
    test's task names nothing beyond its files."""
    return tool_use("respond", {"files": [], "commands": [], "answer": False})


_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "api_error",
                529: "overloaded_error"}


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # bench/broker.py's 100 citizens connect at once


class MessagesServer:
    """Serves queued responses on 127.0.0.1 and records every request."""

    def __init__(self) -> None:
        self.queue: list[Exchange] = []
        # Answers requests when nothing is queued: request body -> response body.
        self.responder: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.api_key = API_KEY  # the key it accepts
        self.lock = threading.Lock()
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def reply(self, body: dict[str, Any], delay_s: float = 0.0) -> None:
        self.queue.append(Exchange(200, body, delay_s=delay_s))

    def error(self, status: int, times: int = 1, message: str = "test error") -> None:
        body = {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"),
                                           "message": message}}
        for _ in range(times):
            # retry-after-ms keeps the SDK's backoff short in tests.
            self.queue.append(Exchange(status, body, {"retry-after-ms": "10"}))

    @staticmethod
    def key_of(headers: Mapping[str, str] | Message[str, str]) -> str:
        """The API key a request carries: `x-api-key`, or a Bearer token (newer SDKs)."""
        bearer = headers.get("authorization", "")
        return headers.get("x-api-key") or bearer.removeprefix("Bearer ")

    def forwarded(self) -> list[dict[str, Any]]:
        """The message requests it received (count-tokens requests carry no max_tokens)."""
        return [r for r in self.requests if "max_tokens" in r]

    def start(self) -> MessagesServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    if self.path != "/v1/messages":
                        ex = Exchange(404, {"type": "error", "error": {
                            "type": "not_found_error", "message": self.path}})
                    elif server.key_of(self.headers) != server.api_key:
                        ex = Exchange(401, {"type": "error", "error": {
                            "type": "authentication_error", "message": "invalid x-api-key"}})
                    elif not all(k in body for k in ("model", "max_tokens", "messages")):
                        ex = Exchange(400, {"type": "error", "error": {
                            "type": "invalid_request_error", "message": "missing field"}})
                    elif server.queue:
                        ex = server.queue.pop(0)
                    elif server.responder is not None:
                        try:
                            ex = Exchange(200, server.responder(body))
                        except CacheRequestError as exc:  # the API's 400 for bad marks
                            ex = Exchange(400, {"type": "error", "error": {
                                "type": "invalid_request_error", "message": str(exc)}})
                    else:
                        ex = Exchange(500, {"type": "error", "error": {
                            "type": "api_error", "message": "test server: nothing queued"}},
                            {"x-should-retry": "false"})
                if ex.delay_s:
                    time.sleep(ex.delay_s)
                data = json.dumps(ex.body).encode()
                self.send_response(ex.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{len(server.requests)}")
                for k, v in ex.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler


# ------------------------------------------------------------- a scripted model behind it

# The field a structured step's schema asks for, and the purpose it serves.
_PURPOSES = {"tier": "route", "verdict": "verify_task", "commands": "task_deliverables",
             "tools": "select_tools"}


def as_request(body: dict[str, Any]) -> Any:
    """A Messages API request body as the `Request` a scripted provider answers. The wire
    carries no purpose: a forced `respond` call's schema says which step it is."""
    from citizen.llm.base import Request, ToolSpec

    tools = body.get("tools") or []
    forced = (body.get("tool_choice") or {}).get("name")
    schema = next((t["input_schema"] for t in tools if t["name"] == forced), None)
    purpose = "execute"
    if schema is not None:
        props = schema.get("properties", {})
        purpose = next((p for f, p in _PURPOSES.items() if f in props), "structured")
    specs = tuple(ToolSpec(t["name"], t.get("description", ""), t["input_schema"])
                  for t in tools if t["name"] != forced)
    system = tuple(b["text"] for b in body.get("system", ()))
    return Request(messages=body["messages"], system=system, tools=specs,
                   output_schema=schema, max_tokens=body["max_tokens"], purpose=purpose)


class Behind:
    """A scripted provider answering over the wire: the real SDK sends, this server
    turns each request back into a `Request`, asks the provider, and answers as the API
    does - usage counted from the bytes, the prompt cache as the API documents it
    (`tests/prompt_cache.py`: a hit only for an identical prefix up to a breakpoint, each
    entry living its TTL of world time since its last use - `bench/month.py` runs a
    simulated clock)."""

    def __init__(self, provider: Any, cache: PromptCache | None = None) -> None:
        self.provider = provider
        self.cache = cache or PromptCache()  # one organisation's: servers may share it
        self.counted: list[Counted] = []  # each request's split, in order (the bench's)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        from citizen.llm.base import estimate_tokens
        from shared import clock

        counted = self.cache.count(body, estimate_tokens(json.dumps(body)), clock.time(),
                                   estimate_tokens)  # first: a request the API refuses
        self.counted.append(counted)
        reply = self.provider.complete(as_request(body))
        content: list[dict[str, Any]] = []
        if reply.data is not None:
            content.append({"type": "tool_use", "id": "toolu_respond", "name": "respond",
                            "input": reply.data})
        else:
            if reply.text:
                content.append({"type": "text", "text": reply.text})
            content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.input)}
                        for c in reply.tool_calls]
        uses = any(b["type"] == "tool_use" for b in content)
        return message(content, model=body["model"],
                       stop_reason="tool_use" if uses else "end_turn",
                       input_tokens=counted.input_tokens,
                       output_tokens=max(1, estimate_tokens(json.dumps(content))),
                       cache_write=counted.write, cache_read=counted.read,
                       cache_write_1h=counted.write_1h)
