"""Per-operator times of a program run by the ExecuTorch runtime, from its ETDump.

The pip build of executorch 1.5.1 records an event per XNNPACK operator inside a delegate call
("Convolution (NHWC, F32) IGEMM #3", "Transpose (ND, X32) #12", ...) when the program is loaded
with `enable_etdump`; `executorch.devtools.Inspector` reads them back.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

# ETDump events that span others (a whole call, a delegate call, a portable kernel's call): not operators.
SPANS = frozenset({"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "Method::init", "Program::load_method"})


@dataclass(frozen=True)
class OperatorTime:
    name: str  # as XNNPACK names it, e.g. "Fully Connected (NC, F32) GEMM #7"
    ms: float  # median over the runs

    @property
    def kind(self) -> str:
        return operator_kind(self.name)


def operator_kind(name: str) -> str:
    """An operator's name without its number: "Fully Connected (NC, F32) GEMM"."""
    return name.rsplit(" #", 1)[0]


def _timed_events(
    buffer: bytes, inputs: tuple[torch.Tensor, ...], runs: int, method_name: str = "forward"
) -> list[tuple[str, list[float]]]:
    """(name, ms in each of `runs` calls after one untimed call) of every operator of `method_name`,
    in the order they ran. Calls carry state from one to the next, as a stream does."""
    from executorch.devtools import Inspector

    from phaseconv.runtimes.executorch import load_program

    buffer = bytes(buffer)
    program = load_program(buffer, enable_etdump=True, debug_buffer_size=0)
    method = program.load_method(method_name)
    for _ in range(runs + 1):
        method.execute(tuple(inputs))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.etdp"
        program.write_etdump_result_to_file(str(path), str(Path(folder) / "debug.bin"))
        del method, program  # the runtime reads `buffer` until here
        blocks = Inspector(etdump_path=str(path)).event_blocks
    events = [event for block in blocks if block.name == "Execute" for event in block.events]
    events = [e for e in events if e.name not in SPANS and e.perf_data is not None]
    events.sort(key=lambda e: e.start_time[0])
    return [(e.name, e.perf_data.raw[-runs:]) for e in events]


def operator_times(
    buffer: bytes, inputs: tuple[torch.Tensor, ...], runs: int = 10, summary=statistics.median
) -> list[OperatorTime]:
    """Every operator of one call, in the order it ran, with its time over `runs` calls (after one
    untimed call) summarized by `summary` (the median; the mean resolves operators near the
    timer's microsecond). XNNPACK's thread count must be set before (see set_threads)."""
    return [OperatorTime(name, summary(calls)) for name, calls in _timed_events(buffer, inputs, runs)]


def kind_times(
    buffer: bytes, inputs: tuple[torch.Tensor, ...], runs: int = 20, method_name: str = "forward"
) -> dict[str, float]:
    """Milliseconds per call of `method_name` spent in each kind of operator ("Fully Connected (NC,
    F32) GEMM", ..., and the portable kernels): the median over `runs` calls of each call's sum."""
    sums: dict[str, list[float]] = {}
    for name, calls in _timed_events(buffer, inputs, runs, method_name):
        kind = operator_kind(name)
        sums[kind] = [a + b for a, b in zip(sums.get(kind, [0.0] * len(calls)), calls)]
    return {kind: statistics.median(samples) for kind, samples in sums.items()}
