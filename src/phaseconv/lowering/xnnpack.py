"""Lowering to ExecuTorch's XNNPACK backend: the partitioner's configs, the passes phaseconv adds, and
the program's assembly from its methods, each lowered on its own.

Facts of the stock lowering this module encodes (executorch 1.5.1):
- a buffer the program writes starts from garbage unless its initial value is serialized;
- a program of several methods shares a buffer the methods name alike only when planned so
  (`share_mutable_buffers`), and its emitter can give a buffer another constant's bytes;
- methods lowered one at a time and assembled give the bytes of one call over all of them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.config.gemm_configs import LinearConfig
from executorch.backends.xnnpack.partition.config.generic_node_configs import EluConfig
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.utils.utils import is_param_node
from executorch.exir import (
    EdgeCompileConfig,
    EdgeProgramManager,
    ExecutorchBackendConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.pass_base import ExportPass
from executorch.exir.passes import MemoryPlanningPass
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from phaseconv.errors import PhaseconvError
from phaseconv.graph.program import copy_graph, declared_ranges_kept
from phaseconv.lowering.blobs import BlobFolder, spilled_as_serialized
from phaseconv.lowering.passes import inferred_view_sizes, phaseconv_passes
from phaseconv.lowering.profile import StageLog

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


@contextlib.contextmanager
def shallow_provenance():
    """torch.fx keeps each node's whole history in its meta ("from_node") and copies it at every pass
    that touches the node; lowering runs dozens of passes over every method, and nothing in a program
    file reads that history. Meanwhile a node remembers only the pass that made it."""
    from torch.fx.traceback import NodeSource

    original = NodeSource.__init__

    def remember_last(self, node, pass_name="", action=None):
        history = node.meta.pop("from_node", None) if node is not None else None
        try:
            original(self, node, pass_name, action)
        finally:
            if history is not None:
                node.meta["from_node"] = history

    NodeSource.__init__ = remember_last
    try:
        yield
    finally:
        NodeSource.__init__ = original


class StagedPartitioner(XnnpackPartitioner):
    """XNNPACK's partitioner, which says in `stages` when partitioning begins: the edge program is made."""

    def __init__(self, configs: list, name: str, stages: StageLog | None):
        super().__init__(configs=configs)
        self.method, self.stages = name, stages

    def partition(self, exported_program):
        if self.stages is not None:
            self.stages.start("to_backend", self.method)
        return super().partition(exported_program)


def lower_method(
    name: str,
    program: ExportedProgram,
    xnnpack_elu: bool = False,
    shape_chains: bool = False,
    weight_cache: bool = True,
    external_constants: bool = False,
    stages: StageLog | None = None,
    blobs: BlobFolder | None = None,
) -> ExportedProgram:
    """One method to the edge dialect ("to_edge" in `stages`), its XNNPACK partitions lowered
    ("to_backend": partitioning, and XNNPACK's preprocess, which serializes the weights, into `blobs`
    if given) (see to_xnnpack)."""
    if stages is not None:
        stages.start("to_edge", name)
    # a copy: the stock lowering takes a tensor constant that several delegated ops read out of the
    # program it is given, which then neither lowers nor runs again (KeyError on the constant)
    program = copy_graph(program)
    if external_constants:
        program = _tag_constants_external(program)
    configs = partitioner_configs(xnnpack_elu, weight_cache)
    with contextlib.ExitStack() as stack:
        stack.enter_context(declared_ranges_kept(program))
        stack.enter_context(shallow_provenance())
        stack.enter_context(phaseconv_passes() if shape_chains else contextlib.nullcontext())
        stack.enter_context(spilled_as_serialized(blobs) if blobs is not None else contextlib.nullcontext())
        edge = to_edge_transform_and_lower(
            {name: program},
            transform_passes=[inferred_view_sizes],
            partitioner=[StagedPartitioner(configs, name, stages)],
            compile_config=EdgeCompileConfig(_check_ir_validity=False),
        )
    return edge.exported_program(name)


def assemble(
    methods: dict[str, ExportedProgram],
    constant_methods: dict | None = None,
    shared_buffers: bool = True,
    external_constants: bool = False,
) -> ExecutorchProgramManager:
    """One program of lowered methods (lower_method's), with `constant_methods` beside them; with
    `shared_buffers`, the buffers the methods name alike are one buffer (share_mutable_buffers)."""
    # in the emitter's order (by name), so that a buffer's initial value is in the first method emitted
    # that has it (InitialValueOnce): a reset's constant of the same bytes, in a later method, cannot
    # take its place (_own_initial_values repairs the cases left)
    methods = dict(sorted(methods.items()))
    edge = EdgeProgramManager(methods, constant_methods, EdgeCompileConfig(_check_ir_validity=False))
    written = sorted({name for method in methods.values() for name in _mutated_buffer_inputs(method)})
    shared = shared_buffers and bool(written)
    config = ExecutorchBackendConfig(
        external_constants=external_constants,
        passes=[InitialValueOnce(written)],
        # a state written by index (a KV cache's index_copy_) is written in place, not copied whole
        run_reinplace_pass=True,
        memory_planning_pass=StateWritesPlannedInPlace(share_mutable_buffers=shared),
        emit_mutable_buffer_names=shared,
    )
    with shallow_provenance():
        manager = edge.to_executorch(config)
    _own_initial_values(manager, config)
    return manager


def to_xnnpack(
    ep: ExportedProgram | dict[str, ExportedProgram],
    external_constants: bool = False,
    xnnpack_elu: bool = False,
    shape_chains: bool = False,
    constant_methods: dict | None = None,
    weight_cache: bool = True,
    progress: Callable[[str, float], None] | None = None,
) -> ExecutorchProgramManager:
    """Stock lowering: every op XNNPACK takes goes to its delegate, the rest runs portable.

    With external_constants, every constant (delegated or not) is tagged for the .ptd data file.
    With xnnpack_elu, ELU goes to XNNPACK's own ELU: ExecuTorch ships its config (EluConfig) and
    serializer but leaves it out of the partitioner's default list. With shape_chains, chains of
    views and permutes in the delegate move its buffers at most once (lowering/layout.py).
    A dict of programs becomes one program of several methods, whose buffers of one name are one
    buffer (ExecuTorch's share_mutable_buffers: a state one method writes, another reads);
    `constant_methods` adds methods that return constants. weight_cache=False is for a loader
    without XNNPACK's weight cache: a weight several linears read reaches them at run time
    (SharedWeightAtRunTimeConfig), one copy in memory instead of one per operator, packed per call.
    `progress(method, seconds)` hears of each method lowered.
    """
    programs = ep if isinstance(ep, dict) else {"forward": ep}
    options = {
        "xnnpack_elu": xnnpack_elu,
        "shape_chains": shape_chains,
        "weight_cache": weight_cache,
        "external_constants": external_constants,
    }
    lowered = {}
    for name, program in programs.items():
        start = time.perf_counter()
        lowered[name] = lower_method(name, program, **options)
        if progress is not None:
            progress(name, time.perf_counter() - start)
    return assemble(lowered, constant_methods, isinstance(ep, dict), external_constants)


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
    buffer share its memory, so the file need hold it once (not once per method that reads a KV cache).
    The same pass object sees the methods in
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
    every buffer it writes, never used (executorch 1.5.1: a second KV cache in the arena of each
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


def write_program(manager: ExecutorchProgramManager, folder: str | Path | None) -> tuple[Path, Path | None]:
    """The program's .pte, and its .ptd when constants are external, written to new files in `folder`
    (default: the system's temporary folder) as ExecuTorch's serializer streams them from the
    weights' files: a program of gigabytes is never whole in memory."""
    data = manager._tensor_data or {}  # Cords, as the program's own: its pieces, the weights' files among them
    if len(data) > 1:
        raise PhaseconvError(f"expected one external data file, got {sorted(data)}")
    paths = []
    for suffix, write in [(".pte", manager.write_to_file), *((".ptd", cord.write_to_file) for cord in data.values())]:
        handle, name = tempfile.mkstemp(prefix=".phaseconv-", suffix=suffix, dir=folder)
        with os.fdopen(handle, "wb") as file:
            write(file)
        paths.append(Path(name))
    return paths[0], paths[1] if len(paths) > 1 else None


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
