"""Interleaved timing: every program runs once per round, so drift hits all of them alike."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable


def wait_until_others_idle(window: float = 0.01, limit: float = 0.2) -> None:
    """Busy-wait until the process's other threads use under a fifth of a core over `window` s
    (at most `limit` s): until the threads a runtime leaves spinning after a call have parked.
    The kernel adds up other threads' CPU time at its clock ticks (every 4 ms at 250 Hz), hence
    a window of several ticks.

    ONNX Runtime's intra-op threads spin after a run (its default: with spinning off its multi-thread
    runs are slower), and PyTorch's OpenMP threads after each parallel region (an eager run, or the
    ExecuTorch binding's copy of a large output): on two cores they take the core the next runner's
    second thread needs. This thread busy-waits instead of sleeping: a virtual machine parks idle
    cores, which a runner then pays for, while a real app's decoder runs on warm cores."""
    deadline = time.perf_counter() + limit
    while time.perf_counter() < deadline:
        wall, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - wall < window:
            pass
        others = (time.process_time() - cpu) - (time.perf_counter() - wall)
        if others < 0.2 * window:
            return


def interleaved_times(
    runners: dict[str, Callable[[], object]],
    runs: int,
    warmup: int = 3,
    on_round: Callable[[], None] | None = None,
    settle: Callable[[], None] = wait_until_others_idle,
) -> dict[str, list[float]]:
    """Seconds per call for each runner, over `runs` rounds after `warmup` untimed rounds; before
    each timed call, `settle`, so no runner pays for threads another one left spinning.

    Python's garbage collector is off while they run, as `timeit` does: a benchmark process holds
    exported programs (millions of objects), and a full collection triggered by one runner's small
    allocations would be charged to whichever call was running."""
    for _ in range(warmup):
        for run in runners.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            for name, run in runners.items():
                settle()
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
            if on_round is not None:
                on_round()
    finally:
        if collecting:
            gc.enable()
    return times


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3
