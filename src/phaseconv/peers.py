"""The runtimes phaseconv exports to beside ExecuTorch, in one registry: ONNX Runtime and LiteRT, each
with the stock conversion, phaseconv's export (the rules that pay there, then the conversion), a
session that runs the result, and a check of it against eager PyTorch."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from phaseconv.report import Decision
from phaseconv.rules.sets import RuleSet


@dataclass(frozen=True)
class PeerRuntime:
    """A runtime beside ExecuTorch: `require` says it is installed (a clear error if not), `rules`
    (target) the set that pays on it, `convert` the stock conversion (program -> bytes), `export`
    phaseconv's (program, path, rules[, calibration]) -> (bytes, decisions), `session` (bytes[,
    threads]) runs the bytes, `state_layout` says where a stateful model's state goes."""

    name: str
    require: Callable[[], None]
    rules: Callable[[str], RuleSet]
    convert: Callable
    export: Callable
    session: Callable
    state_layout: str


def onnx_runtime() -> PeerRuntime:
    from phaseconv.onnx_export import ONNX_RULES, export_onnx
    from phaseconv.runtimes.onnxruntime import OrtSession, require_onnx, to_onnx

    layout = "inputs state.<buffer> (initial values by default), outputs state.<buffer>.next after the model's own"
    return PeerRuntime(
        "ONNX Runtime", require_onnx, lambda target: ONNX_RULES, to_onnx, export_onnx, OrtSession, layout
    )


def litert() -> PeerRuntime:
    from phaseconv.litert_export import LITERT_TARGET_RULES, export_litert
    from phaseconv.runtimes.litert import LiteRTSession, require_litert, to_tflite

    layout = (
        "signature serving_default takes the model's inputs then the state and returns its outputs then the next "
        "state; signature initial_state returns the state before the first call"
    )
    rules = LITERT_TARGET_RULES.__getitem__
    return PeerRuntime("LiteRT", require_litert, rules, to_tflite, export_litert, LiteRTSession, layout)


PEERS: dict[str, Callable[[], PeerRuntime]] = {"onnx": onnx_runtime, "litert": litert}


@dataclass(frozen=True)
class PeerCheck:
    """A converted model run in its runtime against eager PyTorch on the example inputs; a stateful
    one over `calls` calls, its state fed back (`state`: the state's tensors)."""

    max_abs_error: float
    calls: int
    state: list[str]
    snr_db: float | None = None  # int8: against the fp32 program in eager


def export_and_check(
    peer: PeerRuntime,
    program,
    inputs: tuple,
    output: Path,
    rules: RuleSet,
    calibration: list | None = None,
) -> tuple[list[Decision], PeerCheck]:
    """`program` rewritten with `rules` and converted for `peer` (`calibration`: quantized to int8 on
    those input sets), written to `output`, then run there against the program in eager PyTorch."""
    from phaseconv.quantize import snr_db

    export = partial(peer.export, calibration=calibration) if calibration is not None else peer.export
    model_bytes, decisions = export(program, output, rules)
    session, reference = peer.session(model_bytes), copy.deepcopy(program.module())  # it shares the buffers
    state_names = session.state_names
    calls = 3 if state_names else 1  # a stateful model: the state each call returns fed to the next
    error, state = 0.0, ()
    for _ in range(calls):
        with torch.no_grad():
            expected = reference(*inputs)  # the eager module keeps its own state
        expected = expected[0] if isinstance(expected, (tuple, list)) else expected
        outputs = session.run(inputs, state)
        state = tuple(outputs[len(outputs) - len(state_names) :])
        error = max(error, float((outputs[0] - expected).abs().max()))
    snr = snr_db(expected, outputs[0]) if calibration is not None else None  # int8 takes no state
    return decisions, PeerCheck(error, calls, list(state_names), snr)
