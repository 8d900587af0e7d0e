"""A program's state (the buffers it writes: a streaming step's caches) made inputs and outputs.

ExecuTorch keeps a mutated buffer between calls; ONNX has no state, and torch.onnx's exporter
drops the writes, so every call would run from the initial state. `explicit_state` re-exports

    forward(*inputs) -> outputs          (writing buffers b_1 .. b_n)
as  forward(*inputs, b_1, .., b_n) -> (*outputs, b_1', .., b_n')

which a runtime calls with the state the previous call returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.graph.program import functional, user_input_nodes


@dataclass(frozen=True)
class State:
    names: tuple[str, ...]  # the buffers, in the order of the extra inputs and outputs
    initial: tuple[torch.Tensor, ...]  # their values before the first call
    inputs: tuple[str, ...]  # the program's own inputs, which come first


class _StateAsArguments(nn.Module):
    """The unlifted program with its buffers set from the trailing arguments and returned after."""

    def __init__(self, module: nn.Module, names: tuple[str, ...], count: int):
        super().__init__()
        self.module, self.names, self.count = module, names, count

    def forward(self, *args):
        for name, value in zip(self.names, args[self.count :]):
            self.module.get_buffer(name).copy_(value)
        out = self.module(*args[: self.count])
        outputs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return (*outputs, *[self.module.get_buffer(name).clone() for name in self.names])


def explicit_state(program: ExportedProgram) -> tuple[ExportedProgram, State | None]:
    """`program` with its written buffers as trailing inputs and outputs (None: it writes none);
    a program that keeps state must have static sizes."""
    program = functional(program)  # in-place writes as buffer mutations, as rewrite leaves them
    names = tuple(program.graph_signature.buffers_to_mutate.values())  # in the order of their outputs
    if not names:
        return program, None
    inputs = program.graph_signature.user_inputs
    values = [node.meta["val"] for node in user_input_nodes(program)]
    if not all(isinstance(size, int) for value in values for size in value.shape):
        raise PhaseconvError("a program that keeps state and has dynamic sizes: export it for one length")
    module = program.module()
    initial = tuple(module.get_buffer(name).detach().clone() for name in names)
    examples = tuple(torch.zeros(value.shape, dtype=value.dtype) for value in values)
    wrapped = torch.export.export(_StateAsArguments(module, names, len(inputs)), (*examples, *initial))
    return wrapped, State(names, initial, tuple(inputs))
