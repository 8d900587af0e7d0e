"""Interleaved timing: every program runs once per round, so drift hits all of them alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_times(
    runners: dict[str, Callable[[], object]], runs: int, warmup: int = 3, on_round: Callable[[], None] | None = None
) -> dict[str, list[float]]:
    """Seconds per call for each runner, over `runs` rounds after `warmup` untimed rounds."""
    for _ in range(warmup):
        for run in runners.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(runs):
        for name, run in runners.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
        if on_round is not None:
            on_round()
    return times


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3
