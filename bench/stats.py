"""Figures for the bench scripts: medians and p95s, printed one line each."""

from __future__ import annotations

import statistics


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def show(label: str, values: list[float], unit: str, scale: float = 1.0) -> None:
    """Print `label: median … p95 … (n=…)`."""
    print(f"{label:<52} median {statistics.median(values) * scale:9.2f} {unit:<5} "
          f"p95 {pct(values, 0.95) * scale:9.2f} {unit}  (n={len(values)})")


def peak(spans: list[tuple[float, float]]) -> int:
    """The most spans (start, end) open at one moment; one ending as another starts
    counts once (ends sort before starts at the same instant)."""
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
