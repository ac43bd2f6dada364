"""llama.cpp's own HTTP server (`llama-server`) with the packaged model, as a real
subprocess: the "server nobody here wrote" for the anthropic provider (its Messages API
at /v1/messages) and the local provider's server mode (/v1/chat/completions).

The binary is built once by scripts/llama_server.sh (scripts/test.sh does it first) and
cached like the llama-cpp-python wheel.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from citizen.config import paths
from citizen.llm.model_file import ensure_model
from tests.mailserver import free_port


def binary() -> Path:
    """The cached llama-server (built on first use, ≈6 minutes on 2 cores)."""
    script = paths.project_dir() / "scripts" / "llama_server.sh"
    out = subprocess.run([str(script)], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


@contextmanager
def running(*flags: str, ctx: int = 8192) -> Iterator[str]:
    """A llama-server on a free loopback port; yields its base URL (no /v1)."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept open for the server's life
        prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [str(binary()), "-m", str(ensure_model()), "--host", "127.0.0.1",
         "--port", str(port), "-c", str(ctx), "-np", "1", "--threads", "2", *flags],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("llama-server did not start; its log: "
                                   + Path(log.name).read_text()[-2000:])
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        Path(log.name).unlink(missing_ok=True)
