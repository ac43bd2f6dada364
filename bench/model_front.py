"""The model server of the ThoughtStream paper scenario (`bench/streams_paper.py`), and
what it saw: a SIMULATED server with the seed's slots, or a counting front of a real
one (llama.cpp's `llama-server --parallel 4`).

Every `/v1/chat/completions` request is counted as it arrives: how many were in
flight then (on a slot or queued) - one arriving with every slot busy waits, the
seed's queue saturation (§1.1: "4/4 slots full + 5 waiting") - and which question it
answers (the question's text is in the answer's prompt). A client that gives up (the
45 s timeout, `models.json` `local.request_timeout_s`) closes its connection: the
stand-in drops its request then, and the front closes its upstream connection, so
llama.cpp cancels the generation too (as Ollama and llama.cpp do for a closed client).

The stand-in: `slots` generations at once, each taking `generation_s` (the seed's
per-answer time), first come first served beyond them. A simulation - no model runs -
and labelled so wherever its figures are printed.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_S = 0.05  # how often a waiting request looks whether its client gave up


def client_gone(sock: socket.socket) -> bool:
    """Whether the client closed its connection (it sent its whole request, so the
    socket turns readable only when it closes)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Front:
    """The server the citizens call (`url`), counting what arrives; simulated when no
    `upstream` is given."""

    def __init__(self, questions: Sequence[str], *, slots: int = 4,
                 generation_s: float = 5.0, upstream: str = "") -> None:
        self.questions, self.slots = list(questions), slots
        self.generation_s, self.upstream = generation_s, upstream.rstrip("/")
        self.cond = threading.Condition()
        self.in_flight = self.running = 0
        self.line: deque[int] = deque()  # tickets of the requests waiting for a slot
        self.tickets = 0
        self.requests: list[dict[str, Any]] = []
        self.peak = 0
        front = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                front.handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def simulated(self) -> bool:
        return not self.upstream

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Front:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def question_of(self, body: bytes) -> int | None:
        text = body.decode(errors="replace")
        for i, q in enumerate(self.questions):
            if json.dumps(q)[1:-1] in text:
                return i
        return None

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self.cond:
            rec: dict[str, Any] = {"question": self.question_of(body), "arrived": time.time(),
                                   "ahead": self.in_flight,
                                   "queued": self.in_flight >= self.slots}
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.requests.append(rec)
        try:
            reply = self._simulate(h, body, rec) if self.simulated else self._forward(h, body)
        finally:
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()
        rec["ended"] = time.time()
        rec["outcome"] = "ok" if reply is not None else "abandoned"
        if reply is not None:
            status, data = reply
            with contextlib.suppress(OSError):
                h.send_response(status)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)

    def _simulate(self, h: BaseHTTPRequestHandler, body: bytes, rec: dict[str, Any]
                  ) -> tuple[int, bytes] | None:
        """A slot when one is free and no one waits before it; then `generation_s`. None
        if the client gave up first (its slot, if it had one, goes to the next)."""
        with self.cond:
            ticket, self.tickets = self.tickets, self.tickets + 1
            self.line.append(ticket)
            while not (self.line[0] == ticket and self.running < self.slots):
                self.cond.wait(POLL_S)
                if client_gone(h.connection):
                    self.line.remove(ticket)
                    self.cond.notify_all()
                    return None
            self.line.popleft()
            self.running += 1
            self.cond.notify_all()
        rec["started"] = time.time()
        try:
            done = time.monotonic() + self.generation_s
            while time.monotonic() < done:
                if client_gone(h.connection):
                    return None
                time.sleep(min(POLL_S, max(0.0, done - time.monotonic())))
        finally:
            with self.cond:
                self.running -= 1
                self.cond.notify_all()
        request = json.loads(body)
        words = max(1, min(int(request.get("max_tokens", 100)), 100))
        return 200, json.dumps({
            "id": f"standin-{rec['arrived']}", "object": "chat.completion",
            "model": "stand-in (simulation)",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "(simulated answer) " + "word " * words}}],
            "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": words},
        }).encode()

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes] | None:
        """The real server's answer; None if the client gave up first (then the upstream
        connection is closed, which cancels the generation there)."""
        where = urllib.parse.urlsplit(self.upstream)
        conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port or 80)
        out: dict[str, Any] = {}

        def call() -> None:
            try:
                conn.request("POST", "/v1/chat/completions", body,
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                out["reply"] = (resp.status, resp.read())
            except (OSError, http.client.HTTPException) as exc:
                out["error"] = exc

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(POLL_S)
            if worker.is_alive() and client_gone(h.connection):
                with contextlib.suppress(OSError):
                    if conn.sock is not None:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()
                worker.join(5)
                return None
        conn.close()
        if "reply" in out:
            status, data = out["reply"]
            return int(status), bytes(data)
        return 502, json.dumps({"error": str(out.get("error"))}).encode()

    def reset(self) -> None:
        """Forget what was counted (between runs; nothing may be in flight)."""
        with self.cond:
            self.requests, self.peak = [], self.in_flight

    def figures(self, questions: int) -> dict[str, Any]:
        """What the server saw: requests, those that waited beyond the slots, those
        abandoned by their client, per question; the questions that saw saturation (one
        of their answers waited), and the most in flight at once (slots + queued)."""
        with self.cond:
            reqs = [dict(r) for r in self.requests]
            peak = self.peak
        per_q = [[r for r in reqs if r["question"] == i] for i in range(questions)]
        waits = [r["started"] - r["arrived"] for r in reqs if "started" in r]
        served = sorted(r["ended"] - r["arrived"] for r in reqs if r.get("outcome") == "ok")
        return {
            "requests": len(reqs),
            "other_requests": sum(r["question"] is None for r in reqs),
            "abandoned": sum(r.get("outcome") == "abandoned" for r in reqs),
            "saturated_questions": sum(any(r["queued"] for r in q) for q in per_q),
            "queued_requests": sum(r["queued"] for r in reqs),
            "peak_in_flight": peak,
            "peak_slots": min(peak, self.slots), "peak_queued": max(0, peak - self.slots),
            "max_queue_wait_s": round(max(waits), 1) if waits else None,
            "served_p50_s": round(served[len(served) // 2], 1) if served else None,
        }
