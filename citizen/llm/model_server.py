"""An OpenAI-compatible model server (llama.cpp's server, Ollama, vLLM) as the local
provider's backend: `/v1/chat/completions` over HTTP, learning once what the server
does not take (the `json_schema` response format, native `tools`)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

from citizen.errors import CitizenError, ProviderError

# How servers say they take no native tools: llama.cpp without --jinja ("tools param
# requires --jinja flag"), Ollama ("... does not support tools"), vLLM ("auto" tool
# choice requires --enable-auto-tool-choice ...).
_NO_TOOLS = re.compile(r"tools param|jinja|(does not|doesn't) support tools|"
                       r"tool.choice requires|tools are not supported", re.IGNORECASE)


class ModelServer:
    """An OpenAI-compatible `/v1/chat/completions` endpoint."""

    def __init__(self, url: str, timeout_s: float) -> None:
        base = url.rstrip("/")
        self.endpoint = base + ("/chat/completions" if base.endswith("/v1") else
                                "/v1/chat/completions")
        self.where = self.endpoint
        self.timeout_s = timeout_s
        # OpenAI's `json_schema` form is the standard (vLLM, Ollama, llama.cpp's
        # server); llama-cpp-python's own server only knows `json_object` + schema.
        self.legacy_json = False
        # Native tool calling until the server refuses it (then the JSON action).
        self.native_tools = True

    def chat_tools(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """A native tool-calling request; None when the server refuses `tools` (from
        then on this backend uses the JSON action)."""
        try:
            return self._post(body)
        except Refused as exc:
            if not _NO_TOOLS.search(exc.detail):  # any other error is an error
                raise ProviderError(exc.message) from exc
            self.native_tools = False
            return None

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        fmt = body.get("response_format")
        if fmt is not None and self.legacy_json:
            body = {**body, "response_format": {"type": "json_object",
                                                "schema": fmt["json_schema"]["schema"]}}
        try:
            return self._post(body)
        except Refused as exc:
            # A server that does not know the json_schema form says so about
            # response_format (llama-cpp-python's server answers 500 for it).
            if fmt is None or self.legacy_json or "response_format" not in exc.detail:
                raise ProviderError(exc.message) from exc
            self.legacy_json = True
            return self.chat(body)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        req = urllib.request.Request(  # noqa: S310 - the operator configures this URL
            self.endpoint, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                result: dict[str, Any] = json.load(resp)
                return result
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode(errors="replace")
            raise Refused(exc.code, detail, self.endpoint) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise ProviderError(
                f"cannot reach the model server at {self.endpoint} ({exc}) - start it, or "
                "clear llm.local_url to use the embedded model") from exc

    def count_tokens(self, text: str) -> int | None:
        return None


class Refused(CitizenError):
    """The server answered with an HTTP error."""

    def __init__(self, code: int, detail: str, endpoint: str) -> None:
        self.code = code
        self.detail = detail
        self.message = (f"the model server at {endpoint} answered HTTP {code}: {detail[:300]} "
                        "- check llm.local_url and that the server runs a chat model")
        super().__init__(self.message)
