"""Provider figures: latency and tokens/s of the embedded model, SDK overhead, import costs.

    .venv/bin/python bench/llm_providers.py [--runs N]

Prints medians and p95s. The Anthropic figures are the provider's own overhead
(SDK + our request/reply handling) against a local Messages API server: no network.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.stats import show  # noqa: E402
from citizen import config  # noqa: E402
from citizen.llm.base import Request  # noqa: E402

VOTE = {"type": "object", "properties": {
    "decision": {"enum": ["approve", "approve_with_concerns", "reject"]},
    "rationale": {"type": "string", "maxLength": 200},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["decision", "rationale", "confidence"]}


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def bench_imports(runs: int) -> None:
    print("\n# import and start-up costs (fresh interpreter each run)")
    for label, code in [
        ("bare python", "pass"),
        ("import citizen.cli (no SDK)", "import citizen.cli"),
        ("import anthropic", "import anthropic"),
    ]:
        show(label, timed(partial(subprocess.run, [sys.executable, "-c", code], check=True,
                                  cwd=ROOT), runs), "ms", 1000)
    citizen = str(Path(sys.executable).with_name("citizen"))
    show("citizen --help (wall)", timed(lambda: subprocess.run(
        [citizen, "--help"], check=True, capture_output=True), runs), "ms", 1000)


def bench_local(runs: int) -> None:
    from citizen.llm.local import LocalProvider
    from citizen.llm.model_file import ensure_model

    print("\n# local provider: llama.cpp in-process, Gemma 3 270M Q4_K_M, "
          f"{config.templates().local.threads or 'default'} threads")
    tpl = config.templates()
    path = ensure_model()
    t = time.perf_counter()
    llm = LocalProvider(tpl.citizen("opus"), tpl.local, tpl.prices, model_file=path)
    print(f"{'model load':<46} {time.perf_counter() - t:8.2f} s")
    backend = llm.backend
    long_prompt = ("The citizen reviewed the proposal and its risks carefully. " * 40).strip()
    prompt_tok = llm.count_tokens(long_prompt)
    pp: list[float] = []
    gen: list[float] = []
    structured: list[float] = []
    latency: list[float] = []
    for i in range(runs):
        # Prompt processing: a long prompt, one output token. A different first word
        # each run keeps llama.cpp's prefix cache from answering from memory.
        r = llm.complete(Request(messages=[{"role": "user", "content": f"{i} {long_prompt}"}],
                                 max_tokens=1))
        pp.append(r.usage.input_tokens / r.latency_s)
        r = llm.complete(Request(messages=[{"role": "user", "content": f"Story {i}:"}],
                                 max_tokens=64))
        gen.append(r.usage.output_tokens / r.latency_s)
        latency.append(r.latency_s)
        r = llm.complete(Request(messages=[{"role": "user", "content": f"Vote {i} on tests."}],
                                 output_schema=VOTE, max_tokens=120))
        structured.append(r.usage.output_tokens / r.latency_s)
    del backend
    print(f"(prompt of {prompt_tok} tokens)")
    show("prompt processing", pp, "tok/s")
    show("generation, free text (64 tokens)", gen, "tok/s")
    show("latency, free text call of 64 tokens", latency, "s")
    show("generation under a JSON-schema grammar", structured, "tok/s")


def bench_anthropic(runs: int) -> None:
    from citizen.llm.anthropic_api import AnthropicProvider
    from tests.anthropic_server import API_KEY, MessagesServer, text

    print("\n# anthropic provider overhead against a local Messages API server (no network)")
    server = MessagesServer().start()
    tpl = config.templates()
    llm = AnthropicProvider(tpl.citizen("opus"), tpl.prices, API_KEY, base_url=server.url)
    req = Request(messages=[{"role": "user", "content": "hi"}], system=("stable " * 500,))
    for _ in range(runs * 10):
        server.reply(text("ok"))
    show("one call, SDK + our handling", timed(lambda: llm.complete(req), runs * 10), "ms", 1000)
    server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    bench_imports(max(3, args.runs // 2))
    bench_anthropic(args.runs)
    bench_local(args.runs)


if __name__ == "__main__":
    main()
