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

SKIPPED = {"Method::execute", "DELEGATE_CALL", "Program::load_method", "Method::init"}


@dataclass(frozen=True)
class OperatorTime:
    name: str  # as XNNPACK names it, e.g. "Fully Connected (NC, F32) GEMM #7"
    ms: float  # median over the runs

    @property
    def kind(self) -> str:
        """The name without its number: "Fully Connected (NC, F32) GEMM"."""
        return self.name.rsplit(" #", 1)[0]


def operator_times(buffer: bytes, inputs: tuple[torch.Tensor, ...], runs: int = 10) -> list[OperatorTime]:
    """Every operator of one call, in the order it ran, with its median time over `runs` calls
    (after one untimed call). XNNPACK's thread count must be set before (see set_threads)."""
    from executorch.devtools import Inspector

    from phaseconv.runtimes.executorch import load_program

    buffer = bytes(buffer)
    program = load_program(buffer, enable_etdump=True, debug_buffer_size=0)
    method = program.load_method("forward")
    method.execute(tuple(inputs))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.etdp"
        for _ in range(runs):
            method.execute(tuple(inputs))
        program.write_etdump_result_to_file(str(path), str(Path(folder) / "debug.bin"))
        del method, program  # the runtime reads `buffer` until here
        blocks = Inspector(etdump_path=str(path)).event_blocks
    events = [event for block in blocks if block.name == "Execute" for event in block.events]
    events = [e for e in events if e.name not in SKIPPED and e.perf_data is not None]
    events.sort(key=lambda e: e.start_time[0])
    return [OperatorTime(e.name, statistics.median(e.perf_data.raw[-runs:])) for e in events]
