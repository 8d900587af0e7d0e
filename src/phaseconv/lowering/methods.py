"""A program's methods rewritten and lowered side by side, one per core.

Each method is lowered on its own (lowering.xnnpack.assemble joins them, to the same bytes as one
lowering of them all), so the methods can be lowered in worker processes forked from this one (they
start with the exported programs in their memory); a worker sends its method back serialized by
ExecuTorch's own serde (with what serde leaves out: each delegate's named data, which parameters
require a gradient).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections.abc import Callable

import torch
from torch.export import ExportedProgram

_work: Callable | None = None  # the job forked workers run, set before they are forked


def default_workers() -> int:
    return len(os.sched_getaffinity(0))


def each_method(
    names: list[str],
    work: Callable[[str], tuple[ExportedProgram, object]],
    workers: int = 1,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, tuple[ExportedProgram, object]]:
    """`work(name)` -> (lowered method, anything) for every name, in `workers` processes (the names
    given first are started first: give the largest first); `progress(name, seconds)` as each ends."""
    global _work
    results = {}
    if workers <= 1 or len(names) <= 1:
        for name in names:
            start = time.perf_counter()
            results[name] = work(name)
            if progress is not None:
                progress(name, time.perf_counter() - start)
        return results
    _work = work
    try:
        with multiprocessing.get_context("fork").Pool(min(workers, len(names))) as pool:
            for name, packed, extra, seconds in pool.imap_unordered(_run, names):
                results[name] = (_unpack(packed), extra)
                if progress is not None:
                    progress(name, seconds)
    finally:
        _work = None
    return results


def _run(name: str):
    torch.set_num_threads(1)  # the parent's OpenMP threads are not in this process
    start = time.perf_counter()
    program, extra = _work(name)
    return name, _pack(program), extra, time.perf_counter() - start


def _delegates(program: ExportedProgram) -> dict[str, object]:
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    return {name: m for name, m in program.graph_module.named_modules() if isinstance(m, LoweredBackendModule)}


def _pack(program: ExportedProgram) -> bytes:
    from executorch.exir.serde.serialize import serialize

    named_data = {name: m.named_data_store_output for name, m in _delegates(program).items()}
    gradients = {name: value.requires_grad for name, value in program.state_dict.items()}
    return pickle.dumps((serialize(program), named_data, gradients))


def _unpack(packed: bytes) -> ExportedProgram:
    from executorch.exir.serde.serialize import deserialize

    artifact, named_data, gradients = pickle.loads(packed)
    program = deserialize(artifact)
    for name, module in _delegates(program).items():
        module._named_data_store_output = named_data[name]
    for name, requires_grad in gradients.items():
        value = program.state_dict[name]
        if requires_grad and not isinstance(value, torch.nn.Parameter):
            program.state_dict[name] = torch.nn.Parameter(value, requires_grad=True)
    return program
