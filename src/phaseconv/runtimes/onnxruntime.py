"""ONNX Runtime, the runtime users would pick instead of ExecuTorch: export to ONNX, load, run.

`torch.onnx.export(ep, dynamo=True)` turns an ExportedProgram (stock, or rewritten by phaseconv)
into an ONNX model; ONNX Runtime's CPU provider runs it with all graph optimizations, one session
per thread count. onnx, onnxscript and onnxruntime are optional: `pip install 'phaseconv[onnx]'`.
"""

from __future__ import annotations

import contextlib
import io

import torch
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError


def _require(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise PhaseconvError(
            f"{module} is not installed: ONNX export and ONNX Runtime need pip install 'phaseconv[onnx]'"
        ) from None


def require_onnx() -> None:
    """ONNX export and ONNX Runtime are installed (a clear message if not)."""
    for module in ("onnx", "onnxscript", "onnxruntime"):
        _require(module)


STATE, NEXT = "state.", ".next"  # a stateful model's state input `state.<buffer>`, its output `state.<buffer>.next`


def to_onnx(ep: ExportedProgram) -> bytes:
    """The ONNX model (serialized ModelProto) of `ep`, by torch.onnx's exporter (dynamo=True).

    A program that keeps state (writes buffers: a streaming step) gets it as inputs
    `state.<buffer>`, after its own, whose initial values are their defaults (a first call may leave
    them out), and as outputs `state.<buffer>.next` after its own, to feed the next call
    (graph/state.py): torch.onnx's exporter alone would drop the writes."""
    from phaseconv.graph.state import explicit_state

    _require("onnxscript")
    program, state = explicit_state(ep)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter prints its progress
        model = torch.onnx.export(program, dynamo=True, verbose=False).model_proto
    if state is not None:
        _name_state(model, state)
    return model.SerializeToString()


def _name_state(model, state) -> None:
    """The exported inputs and outputs of `explicit_state` named as to_onnx says; the initial
    state added as the state inputs' default values."""
    from onnx import numpy_helper

    graph = model.graph
    own, kept = len(state.inputs), len(graph.output) - len(state.names)
    names = {v.name: name for v, name in zip(graph.input, state.inputs)}
    names |= {v.name: STATE + name for v, name in zip(graph.input[own:], state.names)}
    names |= {v.name: STATE + name + NEXT for v, name in zip(graph.output[kept:], state.names)}
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    for value in (*graph.input, *graph.output, *graph.value_info):
        value.name = names.get(value.name, value.name)
    for name, value in zip(state.names, state.initial):
        graph.initializer.append(numpy_helper.from_array(value.numpy(), STATE + name))


def session_options(threads: int):
    """How phaseconv runs ONNX Runtime: all graph optimizations (ORT_ENABLE_ALL), `threads` intra-op
    threads, one inter-op, errors only; otherwise as ORT sets it up: its idle threads spin a while
    after a run before they park (runtimes/timing.py lets them stop before the next runner is timed)."""
    ort = _require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    return options


class OrtSession:
    """An ONNX model loaded by ONNX Runtime's CPU provider with `threads` threads (session_options)."""

    def __init__(self, model: bytes, threads: int = 1):
        ort = _require("onnxruntime")
        options = session_options(threads)
        self._session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        self._names = [i.name for i in self._session.get_inputs()]
        overridable = {i.name for i in self._session.get_overridable_initializers()}
        # a stateful model's state inputs (to_onnx), in the order of its state outputs
        outputs = [o.name for o in self._session.get_outputs()]
        state = [o.removesuffix(NEXT) for o in outputs if o.endswith(NEXT)]
        self.state_names = [name for name in state if name in overridable]

    def run(self, inputs: tuple[torch.Tensor, ...], state: tuple[torch.Tensor, ...] = ()) -> list[torch.Tensor]:
        """The outputs for `inputs`; a stateful model's run from `state` (the `.next` outputs of the
        call before, which come last), or from its initial state when `state` is empty."""
        if len(inputs) != len(self._names):
            raise PhaseconvError(f"the ONNX model takes {len(self._names)} inputs, got {len(inputs)}")
        if state and len(state) != len(self.state_names):
            raise PhaseconvError(f"the ONNX model keeps {len(self.state_names)} state tensors, got {len(state)}")
        feed = {
            name: tensor.detach().numpy() for name, tensor in zip([*self._names, *self.state_names], [*inputs, *state])
        }
        return [torch.from_numpy(output) for output in self._session.run(None, feed)]
