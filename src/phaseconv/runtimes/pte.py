"""Read an ExecuTorch program file: delegate calls, XNNPACK nodes inside them, operators outside."""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader, _get_schema_bytes
from executorch.exir._serialize._flatbuffer import _flatc_decompile
from executorch.exir._serialize._program import _ExtendedHeader, _flatbuffer_to_program, _get_extended_header
from executorch.exir.schema import BackendDelegateDataReference, DataLocation, DelegateCall, KernelCall, Program

from phaseconv.errors import PhaseconvError

XNNPACK = "XnnpackBackend"
TRANSPOSE = "XNNStaticTranspose"
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "int8": 1, "qint8": 1, "qcint8": 1, "qdint8": 1, "qbint4": 0.5, "qcint4": 0.5}
NOT_EXTERNAL = 2**32 - 1  # XNN_INVALID_VALUE_ID: a value that is no input or output of the delegate
BARE_NON_FINITE = re.compile(rb"(?<=[:\[,\s])(-?inf|nan)(?=\s*[,\]}\n])")


@dataclass
class DelegationSummary:
    """How a program is split: delegate calls, the nodes inside them, the operators outside them."""

    partitions: int = 0
    inside: Counter = field(default_factory=Counter)
    outside: Counter = field(default_factory=Counter)
    external_constants: int = 0  # delegate constants kept in a .ptd file beside the .pte
    # XNNPACK operators whose weight another operator reads too (an unrolled LSTM's steps): each packs
    # a copy of its own, and keeps it for the program's life, unless XNNPACK's weight cache is on.
    repacked_weights: int = 0
    repacked_bytes: int = 0
    # XNNPACK operators whose weight reaches the delegate at run time (lowered with
    # weight_cache=False): packed at each call, into the workspace all operators share
    run_time_weights: int = 0

    @property
    def layout_transposes(self) -> int:
        return self.inside[TRANSPOSE]

    def to_dict(self) -> dict:
        return {
            "partitions": self.partitions,
            "inside": dict(sorted(self.inside.items())),
            "outside": dict(sorted(self.outside.items())),
            "layout_transposes": self.layout_transposes,
            "external_constants": self.external_constants,
            "repacked_weights": self.repacked_weights,
            "repacked_bytes": self.repacked_bytes,
            "run_time_weights": self.run_time_weights,
        }


def summarize_pte(data: bytes) -> DelegationSummary:
    """The delegation summary of a serialized program (the bytes of a .pte file), its methods together."""
    summary = DelegationSummary()
    for method in summarize_methods(data).values():
        summary.partitions += method.partitions
        summary.inside.update(method.inside)
        summary.outside.update(method.outside)
        summary.external_constants += method.external_constants
        summary.repacked_weights += method.repacked_weights
        summary.repacked_bytes += method.repacked_bytes
        summary.run_time_weights += method.run_time_weights
    return summary


@dataclass
class _Program:
    """A program file's flatbuffer, parsed, and its bytes (its segments are read where they lie)."""

    program: Program
    data: bytes
    segment_base: int

    def delegate_data(self, reference: BackendDelegateDataReference) -> bytes:
        if reference.location == DataLocation.INLINE:
            return self.program.backend_delegate_data[reference.index].data
        segment = self.program.segments[reference.index]
        start = self.segment_base + segment.offset
        return self.data[start : start + segment.size]


def _parse(data: bytes) -> _Program:
    """The program of a serialized program file, without copying its segments (its weights), which
    ExecuTorch's deserialize_pte_binary does twice."""
    try:
        header = _get_extended_header(data[: 8 + _ExtendedHeader.EXPECTED_LENGTH])  # it copies what it is given
        if header is None:
            return _Program(_flatbuffer_to_program(data), data, 0)
        return _Program(_flatbuffer_to_program(data[: header.program_size]), data, header.segment_base_offset)
    except Exception as error:  # the parser raises anything from struct to flatbuffer errors
        raise PhaseconvError(f"not an ExecuTorch program: {type(error).__name__}: {error}") from None


def planned_bytes(data: bytes) -> tuple[int, int]:
    """What a serialized program's execution plans reserve: the methods' own memory (planned memory
    id 1, their temporaries: summed over the methods, each has its own) and the state they share
    (ids 2 on, mutable buffers: held once)."""
    plans = _parse(data).program.execution_plan
    methods = sum(sum(plan.non_const_buffer_sizes[1:2]) for plan in plans)
    return methods, max(sum(plan.non_const_buffer_sizes[2:]) for plan in plans)


def summarize_methods(data: bytes) -> dict[str, DelegationSummary]:
    """The delegation summary of each method of a serialized program (constant methods left out)."""
    parsed = _parse(data)
    program = parsed.program
    inline = {named.key for named in program.named_data or []}
    summaries = {}
    for plan in program.execution_plan:
        if not plan.chains[0].instructions and not plan.inputs:
            continue  # a constant method (settings the program carries)
        summary = summaries[plan.name] = DelegationSummary()
        for instruction in plan.chains[0].instructions:
            args = instruction.instr_args
            if isinstance(args, DelegateCall):
                summary.partitions += 1
                delegate = plan.delegates[args.delegate_index]
                if delegate.id == XNNPACK:
                    graph = _xnnpack_graph(parsed.delegate_data(delegate.processed))
                    summary.inside.update(node["xnode_union_type"] for node in graph["xnodes"])
                    keys = {c.get("named_key") for c in graph.get("constant_data", [])} - {None, ""}
                    summary.external_constants += len(keys - inline)
                    _count_repacked_weights(graph, summary)
                else:
                    summary.inside[delegate.id] += 1
            elif isinstance(args, KernelCall):
                operator = plan.operators[args.op_index]
                summary.outside[f"{operator.name}.{operator.overload}" if operator.overload else operator.name] += 1
    return summaries


def constant_bytes(data: bytes) -> dict[str, int]:
    """The bytes of XNNPACK constants (weights, as packed for the file) each method reads, a weight
    its delegates share counted once: what a call streams from memory at least."""
    parsed = _parse(data)
    sizes = {}
    for plan in parsed.program.execution_plan:
        constants = {}
        for delegate in plan.delegates:
            if delegate.id == XNNPACK:
                graph = _xnnpack_graph(parsed.delegate_data(delegate.processed))
                data = graph.get("constant_data", [])
                constants |= {c.get("named_key") or (id(graph), i): c.get("size", 0) for i, c in enumerate(data)}
        sizes[plan.name] = sum(constants.values())
    return sizes


def _count_repacked_weights(graph: dict, summary: DelegationSummary) -> None:
    """Readers of each constant weight (a node's filter) past the first, and the bytes of their
    copies; readers of a weight that is a delegate input (packed at each call) apart."""
    nodes = [node["xnode_union"] for node in graph["xnodes"]]
    readers = Counter(node["filter_id"] for node in nodes if "filter_id" in node)
    # a quantized value wraps its tensor value
    tensors = [value["xvalue_union"].get("tensor_value", value["xvalue_union"]) for value in graph["xvalues"]]
    by_id = {tensor["id_out"]: tensor for tensor in tensors if "id_out" in tensor}
    for value_id, count in readers.items():
        tensor = by_id[value_id]
        if tensor.get("external_id", NOT_EXTERNAL) != NOT_EXTERNAL:
            summary.run_time_weights += count
            continue
        element_bytes = ELEMENT_BYTES.get(tensor["datatype"].removeprefix("xnn_datatype_"), 4)
        summary.repacked_weights += count - 1
        summary.repacked_bytes += int((count - 1) * math.prod(tensor.get("dims", [])) * element_bytes)


@contextlib.contextmanager
def mapped(path: str | Path):
    """A program file's bytes, mapped (read where they lie, never copied whole)."""
    path = Path(path)
    if not path.is_file():
        raise PhaseconvError(f"no such file: {path}")
    if path.stat().st_size == 0:
        raise PhaseconvError(f"{path}: not an ExecuTorch program: the file is empty")
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        yield data


def summarize_pte_file(path: str | Path) -> DelegationSummary:
    with mapped(path) as data:
        try:
            return summarize_pte(data)
        except PhaseconvError as error:
            raise PhaseconvError(f"{path}: {error}") from None


def data_file(path: Path) -> Path | None:
    """The .ptd file a program file keeps its constants in (None: it keeps them itself); a clear error
    for a file that is not a program, or a data file that is missing."""
    summary = summarize_pte_file(path)
    data_path = path.with_suffix(".ptd")
    if summary.external_constants and not data_path.is_file():
        raise PhaseconvError(
            f"{path} keeps {summary.external_constants} constants in an external data file, and {data_path} "
            "is missing: put it beside the program"
        )
    return data_path if summary.external_constants else None


def _xnnpack_graph(payload: bytes) -> dict:
    """An XNNPACK delegate payload's graph (its flatbuffer, decoded with ExecuTorch's flatc)."""
    header = XNNHeader.from_bytes(payload[: XNNHeader.EXPECTED_LENGTH])
    graph = payload[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "schema.fbs").write_bytes(_get_schema_bytes())
        (folder / "graph.bin").write_bytes(graph)
        _flatc_decompile(str(folder), str(folder / "schema.fbs"), str(folder / "graph.bin"))
        # flatc writes non-finite floats bare (a clamp's open bound is inf): quote them for json
        text = BARE_NON_FINITE.sub(rb'"\1"', (folder / "graph.json").read_bytes())
        return json.loads(text)
