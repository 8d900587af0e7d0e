"""A 1-D convolution of a few output steps -> its windows times the weight as one matrix product.

With the input zero-padded (p each side), stride 1, dilation d and T outputs:

    conv(x, W, b)[n, o, t] = sum_{u, c} W[o, c, u] * xp[n, c, t + u*d]
                           = (X[n] @ W')[t, o] + b[o],   X[n][t, u*C + c] = xp[n, c, t + u*d],
                                                          W'[u*C + c, o] = W[o, c, u]

the windows (one slice per tap, concatenated on channels, T on the last axis) transposed, a linear
layer (ONNX: a MatMul with a constant weight, and the bias), transposed back. The products are the
same; only the order of the sum changes (float rounding).

For ONNX Runtime (`export_onnx`) at up to 4 outputs: ORT's Conv is a GEMM with the weight as its left
operand and the T output positions as its columns, and takes about as long for 2 outputs as for 16;
its MatMul streams the weight, packed once, past T rows, in time that grows with T, so it wins only
for a few outputs (`python benchmarks/peer_rules.py --outputs` times both). A decoder run on one
frame has such convolutions: Mimi's first after its transformer (2 steps, 1024 x 1024 x 2 after
`padded_taps`) and its first transposed one as a polyphase convolution (2 steps, 4096 x 1024 x 2).
XNNPACK runs a convolution with the output positions as the GEMM's rows already.

For XNNPACK on AVX-512 (`x86-avx512`) at 8 to 128 outputs with a weight larger than the core's L2
(a few MB) and windows within 1 MB: XNNPACK's convolution tiles its output positions by 7 and streams
the whole weight past each tile (rules/transposed_linear.py, which then takes the linear this emits,
weight first, and re-reads the windows from cache instead). It pays for pocket-tts's decoder step
(its 512 x 512 x 7 at 16 steps and 1536 x 512 x 2 at 17; narrow layers at 96 steps lose, hence the
weight limit) and loses for Vocos's iSTFT, whose windows outgrow the cache when re-read per 7 rows,
hence the window limit (`python benchmarks/variants.py --only "(short_conv)"`, results/xeon/variants.json).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor, weighted_operands
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.im2col import _settings, window_weight

aten = torch.ops.aten
MAX_OUTPUTS = 4  # ONNX Runtime's MatMul wins up to here (benchmarks/peer_rules.py --outputs)


@dataclass(frozen=True)
class ShortConvPlan:
    node: Node
    taps: int
    padding: int
    dilation: int
    outputs: int


def linear_weight(weight: torch.Tensor) -> torch.Tensor:
    """W[o, c, u] -> W'^T[o, u*C + c]: the weight of a linear layer over the windows' rows."""
    return window_weight(weight)[..., 0]


class ShortConvRule(Rule):
    """conv1d of at most `max_outputs` output steps -> windows, transposed, a linear layer, transposed back."""

    name = "short_conv"
    stage = 3  # after padded_taps (2), which leaves fewer taps, and the polyphase convolutions (1)

    def __init__(
        self, max_outputs: int = MAX_OUTPUTS, min_outputs: int = 1, min_weight_bytes: int = 0, max_window_bytes=math.inf
    ):
        self.min_outputs, self.max_outputs = min_outputs, max_outputs
        self.min_weight_bytes, self.max_window_bytes = min_weight_bytes, max_window_bytes

    def matches(self, node: Node) -> bool:
        return (
            node.op == "call_function"
            and node.target == aten.conv1d.default
            and all(isinstance(a, Node) for a in node.args[:2])
        )

    def check(self, node: Node, editor: ProgramEditor) -> ShortConvPlan | Skip:
        stride, padding, dilation, groups = _settings(node, 1)
        if groups != 1:
            return Skip(f"grouped convolution ({groups} groups): one matrix product per group")
        if stride != [1]:
            return Skip(f"stride {stride}: the windows would be strided slices (XNNPACK does not delegate them)")
        if not all(isinstance(p, int) for p in padding):
            return Skip(f"padding {padding!r}")
        value, x = node.meta["val"], node.args[0].meta["val"]
        if value.dim() != 3:
            return Skip("an unbatched input")
        if not all(isinstance(n, int) for n in (*x.shape, *value.shape)):
            return Skip("a dynamic size: the number of outputs must be known to be small")
        outputs = value.shape[-1]
        if not self.min_outputs <= outputs <= self.max_outputs:
            return Skip(f"{outputs} outputs: the windows' product paid from {self.min_outputs} to {self.max_outputs}")
        weight_bytes = node.args[1].meta["val"].numel() * 4
        if weight_bytes < self.min_weight_bytes:
            limit = self.min_weight_bytes / 1e6
            return Skip(f"{weight_bytes / 1e6:.2f} MB of weights: under {limit:.1f} MB they stay in cache")
        window_bytes = outputs * node.args[1].meta["val"][0].numel() * 4
        if window_bytes > self.max_window_bytes:
            limit = self.max_window_bytes / 1e6
            return Skip(f"{window_bytes / 1e6:.2f} MB of windows: over {limit:.1f} MB they leave the cache")
        if value.dtype != torch.float32:
            return Skip(f"{value.dtype} convolution: measured for float32")
        constants = [node.args[1]] + ([node.args[2]] if len(node.args) > 2 and node.args[2] is not None else [])
        if not all(isinstance(n, Node) and editor.is_constant_input(n) for n in constants):
            return Skip("weight or bias computed in the graph (quantized, or derived)")
        taps = node.args[1].meta["val"].shape[-1]
        return ShortConvPlan(node, taps, padding[0], dilation[0], outputs)

    def describe(self, plan: ShortConvPlan) -> str:
        return f"{plan.outputs} output steps: {plan.taps} windows concatenated, one MatMul with the weight"

    def apply(self, plan: ShortConvPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x, weight, bias = weighted_operands(node)
        if plan.padding:
            x = editor.emit(node, aten.constant_pad_nd.default, x, [plan.padding, plan.padding], 0.0)
        windows = [
            editor.emit(node, aten.slice.Tensor, x, 2, u * plan.dilation, u * plan.dilation + plan.outputs)
            for u in range(plan.taps)
        ]
        stacked = windows[0] if plan.taps == 1 else editor.emit(node, aten.cat.default, windows, 1)
        rows = editor.emit(node, aten.permute.default, stacked, [0, 2, 1])  # [N, T, taps * C]
        flat = editor.derived_constant(weight, "rows", linear_weight)
        product = editor.emit(node, aten.linear.default, rows, flat, bias)  # [N, T, O]
        editor.replace([node], editor.emit(node, aten.permute.default, product, [0, 2, 1]))
