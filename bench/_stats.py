"""Small statistics helpers shared by the bench scripts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The *q*-th percentile (0-100) of *samples*, nearest-rank."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_us(samples_ns: Sequence[int]) -> dict[str, float]:
    """p10/p50/p90/p99/mean of nanosecond samples, in microseconds."""
    us = [s / 1000 for s in samples_ns]
    return {
        "p10": percentile(us, 10),
        "p50": percentile(us, 50),
        "p90": percentile(us, 90),
        "p99": percentile(us, 99),
        "mean": statistics.fmean(us),
    }
