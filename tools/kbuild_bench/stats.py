"""Figures from timed samples: a per-call time (median, min, mean), GB/s, speedups in a case."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    mean_ms: float
    reps: int


def summarize(times: list[float], calls: int = 1) -> Timing:
    """Median, min and mean of per-call samples (ms); `calls`: the calls each sample timed."""
    return Timing(statistics.median(times), min(times), statistics.fmean(times), len(times) * calls)


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6 if ms > 0 else float("nan")


def speedups(rows: list[dict]) -> None:
    """Each row's `speedup`: another impl's median / its own, for the rows of one case."""
    for row in rows:
        for other in rows:
            if other is not row and row["median_ms"] and other["median_ms"]:
                row["speedup"][other["impl"]] = other["median_ms"] / row["median_ms"]
