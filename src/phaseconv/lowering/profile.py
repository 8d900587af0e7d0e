"""Where a lowering's time and memory go: each stage of each method, in the process that ran it.

A stage's peak is the process's peak resident memory while it ran (Linux keeps one high-water mark
per process, which a stage resets as it starts: /proc/self/clear_refs); its end is the resident and
proportional set size (pages shared with other processes counted in part) when it ended. The
processes' peaks do not add up to the command's: `benchmarks/lowering.py` samples that.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stage:
    process: str  # "main", or "worker" (one process per method)
    method: str | None
    stage: str
    seconds: float
    peak_mib: float
    end_mib: float
    end_pss_mib: float

    def to_dict(self) -> dict:
        return asdict(self)


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pss_mib(pid: int | str = "self") -> float:
    """The proportional set size of a process (0 when it has gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _reset_peak() -> None:
    # not Linux, or not allowed: the peak is then the process's since it started
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


class StageLog:
    """The stages of this process, one running at a time: start() ends the running one."""

    def __init__(self, process: str = "main"):
        self.process = process
        self.stages: list[Stage] = []
        self._running: tuple[str, str | None, float] | None = None

    def start(self, stage: str, method: str | None = None) -> None:
        self.stop()
        _reset_peak()
        self._running = (stage, method, time.perf_counter())

    def stop(self) -> None:
        if self._running is None:
            return
        stage, method, began = self._running
        self._running = None
        seconds = time.perf_counter() - began
        end = _status_mib("VmRSS")
        peak = max(_status_mib("VmHWM"), end)  # the kernel updates the high-water mark lazily
        self.stages.append(Stage(self.process, method, stage, seconds, peak, end, pss_mib()))

    def add(self, stages: list[Stage]) -> None:
        """Stages another process ran (a worker's)."""
        self.stages.extend(stages)
