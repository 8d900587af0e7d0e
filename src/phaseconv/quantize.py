"""int8 in one call: PT2E quantization with ExecuTorch's XNNPACK quantizer, and its signal-to-noise ratio.

    qep = phaseconv.quantize(model, [(x1,), (x2,)])     # static int8, calibrated on x1, x2
    lowered = phaseconv.lower(qep)                       # rewritten in the int8 domain, lowered

Weights are int8 per output channel. "static" quantizes activations with scales fixed by the
calibration inputs; "dynamic" computes them per run (XNNPACK's dynamic int8 covers linear layers
and 2-D convolutions that are not depthwise; the rest stays fp32).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.graph.program import copy_program, user_input_nodes
from phaseconv.graph.quantized import DYNAMIC_INT8_REASON, fold_weight_quantization
from phaseconv.rewrite import rewrite as rewrite_program
from phaseconv.rules import PRE_QUANTIZATION_RULES

MODES = ("static", "dynamic")


def quantize(
    model_or_program: torch.nn.Module | ExportedProgram,
    calibration_inputs: Sequence[tuple[torch.Tensor, ...]] | tuple[torch.Tensor, ...],
    mode: str = "static",
    rewrite_first: bool | None = None,
    keep_float: Sequence[str] = (),
) -> ExportedProgram:
    """The program quantized to int8 with XNNPACKQuantizer (per-channel weights), re-exported.

    `calibration_inputs`: input tuples to run the model on (one tuple is taken as a single set);
    the first is the example the module is exported with. `rewrite_first`: rewrite the float
    program and quantize the result (the polyphase convolutions then get their own int8 scales);
    otherwise phaseconv rewrites the quantized program when it is lowered, keeping XNNPACK's int8
    deconvolution where it wins. None (static mode): rewrite first when the program has a grouped or
    depthwise transposed convolution, which the XNNPACK quantizer leaves in fp32 and XNNPACK then
    cannot lower between int8 neighbours ("Weight and Input should both be quantized").
    `keep_float`: names of submodules (as `named_modules` gives them) whose operators stay fp32.
    Always fp32: the operators no input reaches (phaseconv.graph.keep_float.input_independent: a
    position counter in int8 would stop at calibration's last position) and rotary embeddings of
    interleaved pairs (rules/interleaved_rope.py makes them exact at lowering).
    """
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from phaseconv.graph.keep_float import KeepFloat, require_modules

    if mode not in MODES:
        raise PhaseconvError(f"unknown quantization mode {mode!r}; choose one of {', '.join(MODES)}")
    calibration = input_sets(calibration_inputs)
    if isinstance(model_or_program, ExportedProgram):
        program = model_or_program
    elif isinstance(model_or_program, torch.nn.Module):
        try:
            with torch.no_grad():
                program = torch.export.export(model_or_program.eval(), calibration[0])
        except Exception as error:
            message = str(error).strip().splitlines()[0]
            raise PhaseconvError(
                f"cannot export the model with calibration set 1: {type(error).__name__}: {message}"
            ) from None
    else:
        kind = type(model_or_program)
        raise TypeError(f"expected an nn.Module or an ExportedProgram, got {kind.__module__}.{kind.__qualname__}")
    require_matching_inputs(program, calibration)
    keep_float = (keep_float,) if isinstance(keep_float, str) else tuple(keep_float)
    require_modules(program, keep_float)
    if rewrite_first is None:
        rewrite_first = mode == "static" and has_grouped_deconvolution(program)
    if rewrite_first and mode == "dynamic":
        raise PhaseconvError(f"rewrite_first with dynamic int8: {DYNAMIC_INT8_REASON}")
    if rewrite_first:
        program = rewrite_program(program, rules=PRE_QUANTIZATION_RULES)
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=mode == "dynamic")
    quantizer = KeepFloat(XNNPACKQuantizer().set_global(config), partial(float_nodes, names=keep_float))
    module = copy_program(program).module()  # calibration writes the state buffers of a streaming step
    initial = {name: buffer.clone() for name, buffer in module.named_buffers()}
    prepared = prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for inputs in calibration:
            prepared(*inputs)
        converted = convert_pt2e(prepared)  # its constant folding runs the buffer writes no input reaches
        for name, buffer in converted.named_buffers():  # the int8 program starts where the program does
            if name in initial:
                buffer.copy_(initial[name])
        quantized = torch.export.export(converted, calibration[0])
    return fold_weight_quantization(quantized)


def float_nodes(graph: torch.fx.Graph, names: Sequence[str]) -> set[torch.fx.Node]:
    """The operators `quantize` leaves fp32: those of the named submodules, those no input reaches,
    and rotations of interleaved pairs."""
    from phaseconv.graph.keep_float import from_modules, input_independent
    from phaseconv.rules.interleaved_rope import rotation_nodes

    operators = [node for node in graph.nodes if node.op == "call_function"]
    named = {node for node in operators if from_modules(node, names)}
    return named.union(*(rotation_nodes(node) for node in operators), input_independent(graph))


def has_grouped_deconvolution(program: ExportedProgram) -> bool:
    from phaseconv.rules.conv_transpose import parse_conv_transpose

    convs = (parse_conv_transpose(node) for node in program.graph.nodes)
    return any(conv is not None and conv.groups > 1 for conv in convs)


def input_sets(calibration_inputs) -> list[tuple[torch.Tensor, ...]]:
    """Calibration inputs as a list of input tuples (one tuple of tensors is one set)."""
    if isinstance(calibration_inputs, tuple) and all(isinstance(t, torch.Tensor) for t in calibration_inputs):
        calibration_inputs = [calibration_inputs]
    sets = [tuple(inputs) for inputs in calibration_inputs]
    if not sets:
        raise PhaseconvError("no calibration inputs: give at least one tuple of input tensors")
    return sets


def require_matching_inputs(program: ExportedProgram, sets: list[tuple[torch.Tensor, ...]]) -> None:
    """Every calibration set has the program's number of inputs, shapes and dtypes."""
    expected = [node.meta["val"] for node in user_input_nodes(program)]
    for number, inputs in enumerate(sets, start=1):
        if len(inputs) != len(expected):
            raise PhaseconvError(
                f"calibration set {number} has {len(inputs)} inputs; the program takes {len(expected)}"
            )
        for index, (tensor, val) in enumerate(zip(inputs, expected), start=1):
            if not isinstance(tensor, torch.Tensor):
                raise PhaseconvError(
                    f"calibration set {number}, input {index}: not a tensor but {type(tensor).__name__}"
                )
            shape_fits = tensor.dim() == val.dim() and all(
                not isinstance(n, int) or n == m for n, m in zip(val.shape, tensor.shape)
            )
            if not shape_fits or tensor.dtype != val.dtype:
                raise PhaseconvError(
                    f"calibration set {number}, input {index}: {list(tensor.shape)} {tensor.dtype}, "
                    f"but the program takes {list(val.shape)} {val.dtype}"
                )


def snr_db(reference: torch.Tensor, test: torch.Tensor) -> float:
    """Signal-to-noise ratio of `test` against `reference`: 10 log10(sum ref^2 / sum (ref - test)^2)."""
    reference, test = reference.double(), test.double()
    noise = (reference - test).square().sum().item()
    signal = reference.square().sum().item()
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


def calibration_sets(folder: Path) -> list[tuple[torch.Tensor, ...]]:
    """Calibration inputs from a folder: each `.npy` file is one input (a single-input model), each
    `.npz` file one set of inputs in the archive's order. Sorted by file name."""
    import numpy as np

    if not folder.is_dir():
        raise PhaseconvError(f"--calibration {folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise PhaseconvError(f"--calibration {folder}: no .npy or .npz files in it")
    sets = []
    for path in files:
        try:
            loaded = np.load(path, allow_pickle=False)
            arrays = [loaded] if path.suffix == ".npy" else [loaded[key] for key in loaded.files]
            sets.append(tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
        except (OSError, ValueError) as error:
            raise PhaseconvError(f"--calibration: cannot read {path.name}: {error}") from None
    return sets


# --quantize's names for the modes
FLAGS = {"int8": "static", "int8-dynamic": "dynamic"}
