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


def to_onnx(ep: ExportedProgram) -> bytes:
    """The ONNX model (serialized ModelProto) of `ep`, by torch.onnx's exporter (dynamo=True)."""
    _require("onnxscript")
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter prints its progress
        program = torch.onnx.export(ep, dynamo=True, verbose=False)
    return program.model_proto.SerializeToString()


def session_options(threads: int):
    """How phaseconv runs ONNX Runtime: all graph optimizations (ORT_ENABLE_ALL), `threads` intra-op
    threads, one inter-op, errors only; otherwise as ORT sets it up: its idle threads spin about 30 ms
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

    def run(self, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        if len(inputs) != len(self._names):
            raise PhaseconvError(f"the ONNX model takes {len(self._names)} inputs, got {len(inputs)}")
        feed = {name: tensor.detach().numpy() for name, tensor in zip(self._names, inputs)}
        return [torch.from_numpy(output) for output in self._session.run(None, feed)]
