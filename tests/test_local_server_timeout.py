"""How long a call to an `llm.local_url` model server may take is the operator's rule
(`models.json` `local.request_timeout_s`, beside the server's slots): past it the call
fails. The ThoughtStream seed's timeout is one such (§1.1: "Others timeout at 45
seconds"); `bench/streams.py --scenario paper` sets it to 45 s through this key."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
from pathlib import Path

import pytest

from citizen import config
from citizen.config import paths
from citizen.errors import ProviderError
from citizen.llm.base import Request
from citizen.llm.local import LocalProvider
from citizen.llm.model_server import ModelServer


def test_the_request_timeout_is_the_rules(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    release = tmp_path / "release"
    shutil.copytree(paths.templates_dir(), release)
    models = json.loads((release / "models.json").read_text())
    models["local"]["request_timeout_s"] = 45
    (release / "models.json").write_text(json.dumps(models))
    monkeypatch.setenv("EXPERIENCE_RULES_DIR", str(release))
    tpl = config.templates()
    llm = LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices,
                        url="http://127.0.0.1:9/v1")
    assert isinstance(llm.backend, ModelServer)
    assert llm.backend.timeout_s == 45


def test_a_server_that_does_not_answer_in_time_fails_the_call() -> None:
    tpl = config.templates()
    settings = dataclasses.replace(tpl.local, request_timeout_s=0.5)
    with socket.socket() as server:  # listens (the kernel accepts) and never answers
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
        llm = LocalProvider(tpl.citizen("opus"), settings, tpl.prices, url=url)
        with pytest.raises(ProviderError, match="timed out"):
            llm.complete(Request(messages=[{"role": "user", "content": "What is a lock?"}],
                                 max_tokens=20))
