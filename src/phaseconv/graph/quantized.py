"""The quantize/dequantize patterns of a PT2E-quantized graph (`quantized_decomposed` ops).

A statically quantized value travels as `dequantize_per_tensor(int8, scale, zero_point, qmin, qmax,
dtype)`; XNNPACK runs an op in int8 when its inputs come from dequantizes and its output goes to a
quantize. Data movement (view, permute, slice, cat) between a dequantize and a quantize with the
same parameters moves int8 values exactly: `q(dq(v)) == v`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the quantized_decomposed ops)
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor

QUANTIZE = torch.ops.quantized_decomposed.quantize_per_tensor.default
DEQUANTIZE = torch.ops.quantized_decomposed.dequantize_per_tensor.default
DEQUANTIZE_PER_CHANNEL = torch.ops.quantized_decomposed.dequantize_per_channel.default

# (scale, zero_point, quant_min, quant_max, dtype) of a per-tensor quantize or dequantize.
Params = tuple


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight given as dequantize(values, scale, zero_point[, axis], quant_min, quant_max, dtype).

    `axis` is None for a per-tensor scale; per channel, `scale` and `zero_point` are constants with
    one entry per index of `axis`.
    """

    values: Node
    scale: Node | float
    zero_point: Node | int
    axis: int | None
    quant_min: int
    quant_max: int
    dtype: torch.dtype


def quantized_weight(node: Node) -> QuantizedWeight | None:
    """Read `node` as a dequantized weight, or None if it is not one."""
    if not isinstance(node, Node) or node.op != "call_function" or node.kwargs.get("out_dtype") is not None:
        return None
    if node.target == DEQUANTIZE and len(node.args) == 6:
        values, scale, zero_point, quant_min, quant_max, dtype = node.args
        return QuantizedWeight(values, scale, zero_point, None, quant_min, quant_max, dtype)
    if node.target == DEQUANTIZE_PER_CHANNEL and len(node.args) == 7:
        return QuantizedWeight(*node.args)
    return None


def dequantized_params(node: Node) -> Params | None:
    """The parameters of a per-tensor dequantize with constant scale and zero point."""
    if isinstance(node, Node) and node.op == "call_function" and node.target == DEQUANTIZE:
        params = tuple(node.args[1:])
        if not any(isinstance(p, Node) for p in params) and not node.kwargs:
            return params
    return None


def quantized_output_params(node: Node) -> Params | None:
    """The parameters of the per-tensor quantize that is the only reader of `node`."""
    if len(node.users) != 1:
        return None
    (user,) = node.users
    if user.op == "call_function" and user.target == QUANTIZE and user.args[0] is node and not user.kwargs:
        params = tuple(user.args[1:])
        if not any(isinstance(p, Node) for p in params):
            return params
    return None


def requantizer(editor: ProgramEditor, anchor: Node, params: Params | None) -> Callable[[Node], Node]:
    """value -> dq(q(value, params), params) emitted before `anchor`; the identity for None."""
    if params is None:
        return lambda value: value
    return lambda value: editor.emit(anchor, DEQUANTIZE, editor.emit(anchor, QUANTIZE, value, *params), *params)


CHOOSE_QPARAMS = torch.ops.quantized_decomposed.choose_qparams.tensor
# ExecuTorch 1.5.1's XNNPACK lowering breaks a dynamically quantized convolution whose output is
# reshaped on its way to another one (conv2d -> view -> conv2d fails at run time; with an interleave
# between them the output is noise): the rules that emit views leave such graphs alone.
DYNAMIC_INT8_REASON = (
    "dynamically quantized graph: ExecuTorch 1.5.1's XNNPACK lowering breaks a dynamic int8 convolution "
    "whose output is reshaped (the interleave's views), measured as noise or a run-time failure"
)


def is_dynamically_quantized(graph: torch.fx.Graph) -> bool:
    """Does the graph compute activation scales at run time (PT2E dynamic quantization)?"""
    return bool(graph.find_nodes(op="call_function", target=CHOOSE_QPARAMS))


QUANTIZE_WEIGHT = (QUANTIZE, torch.ops.quantized_decomposed.quantize_per_channel.default)


def fold_weight_quantization(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Replace quantize(constant weight) by the int8 constant it computes, in place.

    convert_pt2e folds these itself, but not in every graph (a streaming step's, whose state
    buffers the graph writes): left there, they run as portable ops on every call.
    """
    editor = ProgramEditor(program)
    for node in list(editor.graph.nodes):
        weight = node.args[0] if node.op == "call_function" and node.target in QUANTIZE_WEIGHT else None
        if not (isinstance(weight, Node) and weight.op == "placeholder" and editor.is_constant_input(weight)):
            continue
        with torch.no_grad():
            value = editor.constant_value(node)
        editor.replace([node], editor.new_constant(value, node.name))
    return editor.finish()
