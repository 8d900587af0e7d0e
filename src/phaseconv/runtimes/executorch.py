"""Lowering to ExecuTorch's XNNPACK backend, loading and running programs with its runtime.

Runtime facts this module encodes (executorch 1.5.1):
- the thread pool size must be set before any XNNPACK program is loaded (later it crashes);
- a program loaded from bytes does not copy them: they must outlive the program;
- a buffer the program writes starts from garbage unless its initial value is serialized;
- XNNPACK packs a private copy of a weight for every operator that reads it unless its weight
  cache is on (off in the pip build; `weight_cache` below turns it on for each load), or the weight
  reaches the operators at run time (`to_xnnpack(..., weight_cache=False)`): then it is packed at
  each call, into the runtime's one workspace.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from executorch.backends.xnnpack.partition.config.generic_node_configs import EluConfig
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.utils.utils import is_param_node
from executorch.exir import (
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.pass_base import ExportPass
from executorch.exir.passes import MemoryPlanningPass
from executorch.extension.pybindings import portable_lib
from executorch.runtime import Runtime
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from phaseconv.errors import PhaseconvError
from phaseconv.graph.program import copy_program, declared_ranges_kept
from phaseconv.runtimes.backend_options import WEIGHT_CACHE, set_xnnpack_option
from phaseconv.runtimes.xnnpack_layout import shape_chains_on_buffer

_threads_locked = False


def set_threads(count: int) -> None:
    """Size XNNPACK's thread pool. Only allowed before the first program is loaded."""
    if _threads_locked:
        raise RuntimeError("the thread count must be set before any ExecuTorch program is loaded")
    portable_lib._unsafe_reset_threadpool(count)


EXTERNAL_TAG = "_default_external_constant"
# What phaseconv.lower adds to the stock lowering: XNNPACK's own ELU, shape chains moved on the buffer.
PHASECONV_LOWERING = {"xnnpack_elu": True, "shape_chains": True}


class RunTimeWeightLinearConfig(LinearConfig):
    """XNNPACK's linear, with the weight as a run-time input of the delegate (the stock partitioner's
    force_non_static_weights_for_f32_linear: XNNPACK packs it at each call, into the workspace all its
    operators share) for an fp32 linear whose input is a constant and whose weight is not (the
    transposed_linear rule's W x^T), which would otherwise run portable; and, with
    `shared_weights_at_run_time` (a loader without the weight cache), for one whose weight other
    linears read too (the steps of an unrolled LSTM), instead of a packed copy per operator at load.
    Forced for every linear, that flag broke a load (a convolution failed: xnn_status_invalid_parameter)."""

    shared_weights_at_run_time = False

    def get_deps(self, node, ep):
        data, weight = node.args[0], node.args[1]
        weight_first = is_param_node(ep, data) and not is_param_node(ep, weight)
        shared = sum(user.target == node.target for user in weight.users) > 1
        self.force_non_static_weights_for_f32_linear = weight_first or (self.shared_weights_at_run_time and shared)
        return super().get_deps(node, ep)


class SharedWeightAtRunTimeConfig(RunTimeWeightLinearConfig):
    shared_weights_at_run_time = True


def partitioner_configs(xnnpack_elu: bool = False, weight_cache: bool = True) -> list:
    """XNNPACK's partitioner configs, with its ELU (`xnnpack_elu`), linears of a run-time weight, and
    with shared linear weights given at run time for a loader without the weight cache (weight_cache=False)."""
    linear = RunTimeWeightLinearConfig if weight_cache else SharedWeightAtRunTimeConfig
    configs = [*ALL_PARTITIONER_CONFIGS, *([EluConfig] if xnnpack_elu else [])]
    return [linear if c is LinearConfig else c for c in configs]


def to_xnnpack(
    ep: ExportedProgram | dict[str, ExportedProgram],
    external_constants: bool = False,
    xnnpack_elu: bool = False,
    shape_chains: bool = False,
    constant_methods: dict | None = None,
    weight_cache: bool = True,
) -> ExecutorchProgramManager:
    """Stock lowering: every op XNNPACK takes goes to its delegate, the rest runs portable.

    With external_constants, every constant (delegated or not) is tagged for the .ptd data file.
    With xnnpack_elu, ELU goes to XNNPACK's own ELU: ExecuTorch ships its config (EluConfig) and
    serializer but leaves it out of the partitioner's default list. With shape_chains, chains of
    views and permutes in the delegate move its buffers at most once (runtimes/xnnpack_layout.py).
    A dict of programs becomes one program of several methods, whose buffers of one name are one
    buffer (ExecuTorch's share_mutable_buffers: a state one method writes, another reads);
    `constant_methods` adds methods that return constants. weight_cache=False is for a loader
    without XNNPACK's weight cache: a weight several linears read reaches them at run time
    (SharedWeightAtRunTimeConfig), one copy in memory instead of one per operator, packed per call.
    """
    # copies: the stock lowering takes a tensor constant that several delegated ops read out of the
    # program it is given, which then neither lowers nor runs again (KeyError on the constant)
    # in the emitter's order (by name), so that a buffer's initial value is in the first method emitted
    # that has it (InitialValueOnce): a reset's constant of the same bytes, in a later method, cannot
    # take its place (_own_initial_values repairs the cases left)
    programs = {
        name: copy_program(program)
        for name, program in sorted((ep if isinstance(ep, dict) else {"forward": ep}).items())
    }
    if external_constants:
        programs = {name: _tag_constants_external(program) for name, program in programs.items()}
    configs = partitioner_configs(xnnpack_elu, weight_cache)
    chains = shape_chains_on_buffer() if shape_chains else contextlib.nullcontext()
    with contextlib.ExitStack() as stack:
        for program in programs.values():
            stack.enter_context(declared_ranges_kept(program))
        stack.enter_context(chains)
        edge = to_edge_transform_and_lower(
            programs if isinstance(ep, dict) else programs["forward"],
            partitioner=[XnnpackPartitioner(configs=configs)],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
            constant_methods=constant_methods,
        )
    written = sorted(
        {name for method in edge.methods for name in _mutated_buffer_inputs(edge.exported_program(method))}
    )
    shared = isinstance(ep, dict) and bool(written)
    config = ExecutorchBackendConfig(
        external_constants=external_constants,
        passes=[InitialValueOnce(written)],
        # a state written by index (a KV cache's index_copy_) is written in place, not copied whole
        run_reinplace_pass=True,
        memory_planning_pass=StateWritesPlannedInPlace(share_mutable_buffers=shared),
        emit_mutable_buffer_names=shared,
    )
    manager = edge.to_executorch(config)
    _own_initial_values(manager, config)
    return manager


def _own_initial_values(manager: ExecutorchProgramManager, config: ExecutorchBackendConfig) -> None:
    """Gives every buffer its own initial value in the file. ExecuTorch 1.5.1's emitter, when it
    names the buffers (a program of several methods), looks a buffer's value up among the constants
    emitted before it: a constant of the same bytes (a reset's zeros, a block of zeros folded from
    zeros_like) gave its index, which the runtime reads in the buffers' data, so the method loaded
    another buffer's value or failed to load. Each such value is added to the buffers' data here and
    the program serialized again."""
    from executorch.exir._serialize._serialize import serialize_for_executorch
    from executorch.exir.schema import Buffer

    output = manager._emitter_output
    data = list(output.mutable_data or [Buffer(storage=b"")])  # index 0: no data
    repaired = False
    for plan in output.program.execution_plan:
        values = None
        for value in plan.values:
            tensor, info = value.val, getattr(value.val, "extra_tensor_info", None)
            if getattr(tensor, "allocation_info", None) is None or not getattr(tensor, "data_buffer_idx", 0):
                continue
            if info is None or info.fully_qualified_name is None:
                continue
            values = values or dict(manager.exported_program(plan.name).named_buffers())
            own = values[info.fully_qualified_name].detach().contiguous().flatten().view(torch.uint8)
            own = own.numpy().tobytes()
            index = tensor.data_buffer_idx
            if index < len(data) and data[index].storage == own:
                continue
            data.append(Buffer(storage=own))
            tensor.data_buffer_idx, repaired = len(data) - 1, True
    if repaired:
        output.mutable_data = data
        manager._pte_data, manager._tensor_data = serialize_for_executorch(
            output, config, manager._data_serializer, manager._named_data
        )
        manager._buffer = None


class InitialValueOnce(ExportPass):
    """Gives each written buffer (by placeholder name) its initial value in the first method that has
    it (to_xnnpack gives the methods in the emitter's order), as InitializedMutableBufferPass does in
    every one. The runtime copies the value in when that method is loaded; the methods that share the
    buffer share its memory, so the file need hold it once (a 12.6 MB KV cache read by eight methods
    of a text-to-speech program was 100 MB of one file). The same pass object sees the methods in
    turn. A buffer of no elements is never marked: it has no value, and its bytes (none) are an empty
    constant's to ExecuTorch's emitter (see _own_initial_values; english_2026-09's int8 decoder: its
    reset method, the first to hold the empty states, failed to load with "offset index out of
    range")."""

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.waiting = set(names)

    def placeholder(self, name: str, arg, meta):
        if name in self.waiting and meta["val"].numel() > 0:
            self.waiting.remove(name)
            meta["et_init_buffer"] = True
        return super().placeholder(name, arg, meta)


class StateWritesPlannedInPlace(MemoryPlanningPass):
    """ExecuTorch's memory planning, with each write into a buffer planned where the buffer lies.

    An in-place write into a buffer (a `copy_` of its write-back, or an `index_put_` the reinplace
    pass made) returns the buffer, and the planner gives the write's result the buffer's place; but
    the output node keeps the result's spec from before, so the method's arena got a second copy of
    every buffer it writes, never used (executorch 1.5.1: a KV cache of 12 MiB in the arena of each
    method that writes all of it). Here the output's spec of such a write is the buffer's."""

    def run(self, graph_module, graph_signature=None):
        output = graph_module.graph.output_node()
        results, specs = output.args[0], output.meta.get("spec")
        buffers = set(graph_signature.inputs_to_buffers) if graph_signature is not None else set()
        if isinstance(specs, (tuple, list)) and len(specs) == len(results):
            output.meta["spec"] = type(specs)(
                _written_buffer(result, buffers, spec) for result, spec in zip(results, specs)
            )
        return super().run(graph_module, graph_signature)


def _written_buffer(node, buffers: set[str], spec):
    """The spec of the buffer that `node` writes in place (through a chain of in-place writes), else `spec`."""
    written = node
    while isinstance(written, torch.fx.Node) and _writes_first_argument(written):
        written = written.args[0]
    if written is not node and written.op == "placeholder" and written.name in buffers:
        return written.meta["spec"]
    return spec


def _writes_first_argument(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    if schema is None or not schema.arguments or not isinstance(node.args[0], torch.fx.Node):
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write


def _mutated_buffer_inputs(ep: ExportedProgram) -> list[str]:
    """Placeholders of the buffers the program writes. ExecuTorch serializes only their shape and
    dtype unless told otherwise, so a stateful program would start from memory that eager never had
    (a streaming decoder's first frames then differ); with these, each starts from its buffer's value."""
    signature = ep.graph_signature
    written = set(signature.buffers_to_mutate.values())
    return [name for name, target in signature.inputs_to_buffers.items() if target in written]


def external_data(manager: ExecutorchProgramManager) -> dict[str, bytes]:
    """The .ptd files of a lowered program, by name (empty when every constant is in the .pte)."""
    _ = manager.buffer  # serializing is what fills in the tensor data
    return {name: bytes(cord) for name, cord in (manager._tensor_data or {}).items()}


def _tag_constants_external(ep: ExportedProgram) -> ExportedProgram:
    constants = {
        spec.arg.name
        for spec in ep.graph_signature.input_specs
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    }
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in constants:
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = EXTERNAL_TAG
    return ep


def load_program(buffer: bytes | Path, weight_cache: bool = True, **options):
    """The runtime's Program for `buffer` (bytes, which must outlive it, or a file's path), XNNPACK's
    weight cache on or off."""
    global _threads_locked
    set_xnnpack_option(WEIGHT_CACHE, weight_cache)
    _threads_locked = True
    return Runtime.get().load_program(buffer, **options)


class LoadedProgram:
    """A program loaded by the ExecuTorch runtime, its methods initialized; keeps its bytes alive
    as long as it lives. `data_path`: the .ptd file of a program saved with external constants.

    A program given as a file's path is mapped, not read: the runtime lets go of each part of the
    file it is done with, such as the weights XNNPACK has packed, where bytes stay resident beside
    the packed copy (benchmarks/tts.py measures the runner's memory, which loads from the path).

    Every method is initialized here, not on its first call (XNNPACK packs its weights then: 28 ms
    for the pocket-tts step), so the first call costs what the others do: time to first audio. A
    method that shares a buffer with another starts it from its initial value when initialized, so
    all are initialized before any runs.
    With `weight_cache` (XNNPACK's `weight_cache_enabled`), operators that read the same constant
    share one packed copy: an unrolled LSTM's steps read one recurrent weight, which stays in cache,
    instead of one private copy per step streamed from memory; methods that read one weight share it.
    `methods`: the names of the methods to initialize (default: all of them)."""

    def __init__(
        self, buffer: bytes | Path, data_path: str | Path | None = None, weight_cache: bool = True, methods=None
    ):
        self._buffer = buffer if isinstance(buffer, Path) else bytes(buffer)
        self._program = load_program(self._buffer, weight_cache, data_path=data_path)
        self.all_methods = sorted(self._program.method_names)
        chosen = self.all_methods if methods is None else [name for name in self.all_methods if name in methods]
        self._methods = {name: self._program.load_method(name) for name in chosen}
        # Planned sizes: a dynamic size is planned for the longest of its declared range.
        self._largest = {
            name: [tuple(method.metadata.input_tensor_meta(i).sizes()) for i in range(method.metadata.num_inputs())]
            for name, method in self._methods.items()
        }

    @property
    def method_names(self) -> list[str]:
        return list(self._methods)

    def run(self, inputs: tuple[torch.Tensor, ...], method: str = "forward") -> list:
        for number, (tensor, largest) in enumerate(zip(inputs, self._largest[method]), start=1):
            if tensor.dim() != len(largest) or any(n > m for n, m in zip(tensor.shape, largest)):
                where = "" if method == "forward" else f" of {method}"
                raise PhaseconvError(
                    f"input {number}{where} has shape {list(tensor.shape)}; the program takes at most "
                    f"{list(largest)} (a dynamic size up to the longest of its declared range)"
                )
        return list(self._methods[method].execute(tuple(inputs)))

    def method_meta(self, method: str = "forward"):
        """Input and output tensor shapes and dtypes of a method, as the program declares them."""
        return self._methods[method].metadata
