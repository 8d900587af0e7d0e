"""How a method crosses between processes without its weights being copied.

To a worker: the exported program's graph, signature and metadata through ExecuTorch's serde (its
weights replaced by their shapes), and its weights as tensors in shared memory (torch.multiprocessing
sends a handle; the worker maps the pages the main process holds). Back: the lowered method through
the same serde, its delegates' named data already in the blob folder (blobs.spill), and what serde
leaves out (each delegate's named data, which parameters require a gradient). The graph each
delegate was lowered from comes back with its weights' shapes only: ExecuTorch's assembly re-runs it
in fake mode, which reads no value, and nothing else reads it.
"""

from __future__ import annotations

import copy
import io
import pickle
from dataclasses import dataclass

import torch
from executorch.exir.serde.serialize import deserialize, serialize
from torch.export import ExportedProgram
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from phaseconv.lowering.blobs import delegates

SHARED_FROM = 2**20  # bytes


def _with_parameter_kind(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if isinstance(like, torch.nn.Parameter):
        return torch.nn.Parameter(value, requires_grad=like.requires_grad)
    return value


def as_meta(value):
    """A tensor's shape, dtype and kind (parameter or not) without its data; anything else as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    return _with_parameter_kind(value.detach().to("meta"), value)


def hollow(value):
    """A meta tensor as a CPU tensor of its shape, strides and dtype whose memory is never written
    (so never made resident); anything else as it is."""
    if not isinstance(value, torch.Tensor) or value.device.type != "meta":
        return value
    empty = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="cpu")
    return _with_parameter_kind(empty, value)


def _weightless(program: ExportedProgram) -> ExportedProgram:
    """A shallow copy of `program` whose weights are meta tensors (its graph is the original's)."""
    light = copy.copy(program)
    light._state_dict = {name: as_meta(value) for name, value in program.state_dict.items()}
    light._constants = {name: as_meta(value) for name, value in program.constants.items()}
    return light


@dataclass
class Wrapped:
    """A tensor subclass that wraps others (torchao's quantized weights: int8 data, scales, zero points),
    which torch.multiprocessing cannot share: its class, its inner tensors (shared), how to rebuild it."""

    kind: type
    inner: dict
    context: object
    size: tuple
    stride: tuple
    parameter: bool

    def rebuilt(self) -> torch.Tensor:
        inner = {name: _landed(value) for name, value in self.inner.items()}
        value = self.kind.__tensor_unflatten__(inner, self.context, self.size, self.stride)
        return torch.nn.Parameter(value, requires_grad=False) if self.parameter else value


@dataclass
class ByValue:
    """A small tensor, copied across (a shared one costs a file descriptor in every process for its life)."""

    data: bytes

    def rebuilt(self) -> torch.Tensor:
        return torch.load(io.BytesIO(self.data), weights_only=False)


def _shared(value):
    """A weight as it crosses: a plain tensor of SHARED_FROM bytes or more in shared memory (moved there
    once: the main process's own tensor then lives there), a smaller one by value, a wrapper subclass
    as its inner tensors; anything else as it is."""
    if is_traceable_wrapper_subclass(value):
        names, context = value.__tensor_flatten__()
        inner = {name: _shared(getattr(value, name)) for name in names}
        parameter = isinstance(value, torch.nn.Parameter)
        return Wrapped(type(value), inner, context, tuple(value.size()), tuple(value.stride()), parameter)
    if not isinstance(value, torch.Tensor):
        return value
    if value.untyped_storage().nbytes() < SHARED_FROM:
        data = io.BytesIO()
        torch.save(value, data)
        return ByValue(data.getvalue())
    if not value.is_shared():
        value.share_memory_()
    return value


def _landed(value):
    return value.rebuilt() if isinstance(value, (Wrapped, ByValue)) else value


def unshared_bytes(programs) -> int:
    """What ship() would move into shared memory for these programs (what is there already left out)."""
    storages = {}
    for program in programs:
        for value in [*program.state_dict.values(), *program.constants.values()]:
            for tensor in _plain_tensors(value):
                storage = tensor.untyped_storage()
                if storage.nbytes() >= SHARED_FROM and not tensor.is_shared():
                    storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def _plain_tensors(value) -> list[torch.Tensor]:
    if is_traceable_wrapper_subclass(value):
        names, _ = value.__tensor_flatten__()
        return [tensor for name in names for tensor in _plain_tensors(getattr(value, name))]
    return [value] if isinstance(value, torch.Tensor) else []


@dataclass
class Shipped:
    """An exported program on its way to a worker: its graph, and its weights in shared memory."""

    graph: object  # ExecuTorch serde's SerializedArtifact, its tensors without data
    state_dict: dict
    constants: dict


def ship(program: ExportedProgram) -> Shipped:
    """`program` for another process, its weights in shared memory, which every worker maps."""
    state_dict = {name: _shared(value) for name, value in program.state_dict.items()}
    constants = {name: _shared(value) for name, value in program.constants.items()}
    return Shipped(serialize(_weightless(program)), state_dict, constants)


def land(shipped: Shipped) -> ExportedProgram:
    """The program `ship` sent, its weights the sender's."""
    program = deserialize(shipped.graph)
    program.state_dict.update({name: _landed(value) for name, value in shipped.state_dict.items()})
    program.constants.update({name: _landed(value) for name, value in shipped.constants.items()})
    return program


def pack(program: ExportedProgram) -> bytes:
    """A lowered, spilled method as bytes, its delegates' graphs without their weights."""
    modules = delegates(program)
    kept = {name: (m.named_data_store_output, m._original_exported_program) for name, m in modules.items()}
    for module in modules.values():
        module._named_data_store_output = None  # sent beside the graph, as the blob files it names
        module._original_exported_program = _weightless(module.original_module)
    gradients = {name: value.requires_grad for name, value in program.state_dict.items()}
    try:
        return pickle.dumps((serialize(program), {name: data for name, (data, _) in kept.items()}, gradients))
    finally:
        for name, module in modules.items():
            module._named_data_store_output, module._original_exported_program = kept[name]


def unpack(packed: bytes) -> ExportedProgram:
    artifact, named_data, gradients = pickle.loads(packed)
    program = deserialize(artifact)
    for name, module in delegates(program).items():
        module._named_data_store_output = named_data[name]
        original = module.original_module
        for weights in (original.state_dict, original.constants):
            weights.update({key: hollow(value) for key, value in weights.items()})
    for name, requires_grad in gradients.items():
        value = program.state_dict[name]
        if requires_grad and not value.requires_grad:  # serde gives parameters back as plain tensors
            program.state_dict[name] = torch.nn.Parameter(value.detach(), requires_grad=True)
    # and their placeholders' values without requires_grad, which the emitter writes into the program
    parameters = program.graph_signature.inputs_to_parameters
    for node in program.graph.nodes:
        if node.op == "placeholder" and gradients.get(parameters.get(node.name)):
            node.meta["val"].requires_grad_(True)
    return program
