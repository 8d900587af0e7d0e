"""Lowering to ExecuTorch's XNNPACK backend, loading and running programs with its runtime.

Runtime facts this module encodes (executorch 1.5.1):
- the thread pool size must be set before any XNNPACK program is loaded (later it crashes);
- `_load_for_executorch_from_buffer` does not copy the bytes: they must outlive the program.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import EdgeCompileConfig, ExecutorchProgramManager, to_edge_transform_and_lower
from executorch.extension.pybindings import portable_lib
from torch.export import ExportedProgram

_threads_locked = False


def set_threads(count: int) -> None:
    """Size XNNPACK's thread pool. Only allowed before the first program is loaded."""
    if _threads_locked:
        raise RuntimeError("the thread count must be set before any ExecuTorch program is loaded")
    portable_lib._unsafe_reset_threadpool(count)


def to_xnnpack(ep: ExportedProgram) -> ExecutorchProgramManager:
    """Stock lowering: every op XNNPACK takes goes to its delegate, the rest runs portable."""
    edge = to_edge_transform_and_lower(
        ep, partitioner=[XnnpackPartitioner()], compile_config=EdgeCompileConfig(_check_ir_validity=False)
    )
    return edge.to_executorch()


class LoadedProgram:
    """A program loaded by the ExecuTorch runtime; keeps its bytes alive as long as it lives."""

    def __init__(self, buffer: bytes):
        global _threads_locked
        self._buffer = bytes(buffer)
        self._module = portable_lib._load_for_executorch_from_buffer(self._buffer)
        _threads_locked = True

    def run(self, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        return list(self._module.forward(tuple(inputs)))


@dataclass
class DelegationSummary:
    """How a lowered program is split: delegate calls, and what runs outside them."""

    partitions: int
    outside: Counter = field(default_factory=Counter)
    inside: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"partitions": self.partitions, "outside": dict(self.outside), "inside": dict(self.inside)}


def delegation_summary(program: ExecutorchProgramManager) -> DelegationSummary:
    """Count delegate calls, the operators inside the delegates, and the operators outside them."""
    graph_module = program.exported_program().graph_module
    summary = DelegationSummary(partitions=0)
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = _op_name(node.target)
        if name == "executorch_call_delegate":
            summary.partitions += 1
            lowered = getattr(graph_module, node.args[0].target)
            for inner in lowered.original_module.graph.nodes:
                if inner.op == "call_function":
                    summary.inside[_op_name(inner.target, inner.args)] += 1
        elif name != "getitem":
            summary.outside[name] += 1
    return summary


def _op_name(target, args=()) -> str:
    name = getattr(target, "__name__", str(target))
    if name.startswith("aten.convolution") and len(args) > 6 and args[6]:
        return "aten.convolution(transposed)"
    return name
