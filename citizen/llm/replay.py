"""The replay provider: answers from a recorded wake log, request by request.

A wake log records each model call as an `llm_call` event carrying the request
digest and the full reply. Replaying hands those replies back in order, so a wake
can be re-run exactly (time-travel debugging) - or, with `strict=False`, re-run
with changed prompts while keeping the recorded answers.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from citizen.errors import ConfigError, ReplayMismatch
from citizen.llm.base import Provider, Reply, Request

LLM_CALL = "llm_call"


class ReplayProvider(Provider):
    """Replies recorded in a wake log, handed back in order."""

    name = "replay"

    def __init__(self, records: Iterable[Mapping[str, Any]], strict: bool = True,
                 source: str = "records") -> None:
        self.records = [r for r in records if r.get("event") == LLM_CALL]
        # As the recorded provider was: a wake recorded with no tool pick replays none.
        self.prompt_cache = bool(self.records) and not any(
            r.get("purpose") == "select_tools" for r in self.records)
        self.strict = strict
        self.source = source
        self.position = 0

    @classmethod
    def from_log(cls, path: Path, strict: bool = True) -> ReplayProvider:
        """Load the `llm_call` events of a JSONL wake log.

        :raises ConfigError: a line of the log is not JSON.
        """
        records = []
        if not path.exists() and path.with_name(path.name + ".gz").exists():
            path = path.with_name(path.name + ".gz")  # compressed by citizen.home.retention
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                text = fh.read()
        else:
            text = path.read_text(encoding="utf-8")
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(path, f"line {lineno}", f"not JSON ({exc.msg})",
                                  "replay needs an intact wake log") from exc
        return cls(records, strict=strict, source=str(path))

    def describe(self) -> str:
        return f"replay ({len(self.records)} recorded calls from {self.source})"

    def complete(self, request: Request) -> Reply:
        if self.position >= len(self.records):
            raise ReplayMismatch(
                f"the recording {self.source} has only {len(self.records)} model calls; the "
                "replayed wake asked for more - it diverged from the recorded one")
        record = self.records[self.position]
        digest = request.digest()
        if self.strict and record.get("request_digest") != digest:
            raise ReplayMismatch(
                f"call {self.position + 1} of {self.source} was recorded for request "
                f"{record.get('request_digest')}, but the wake asked {digest} - the wake "
                "diverged; replay with strict=False to keep going")
        self.position += 1
        return Reply.from_dict(record["reply"])
