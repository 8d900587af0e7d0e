"""A linear layer over a few rows -> the same products with the weight as the left operand:

    y = x W^T + b   ->   y = (W x^T)^T + b     (x: [M, K] rows, W: [N, K] a constant)

XNNPACK's fully connected operator tiles its M rows by 7 on AVX-512 (its f32 GEMM kernel is 7x16)
and streams the whole packed weight past each tile: 8-14 rows read the weight twice, 16 three times.
With W as the operator's input and x as its weight (a run-time weight, packed at each call: M x K
floats), W is read once in tiles of 7 of its N rows and x^T (16 columns: one tile) stays in cache.
Each output is the same sum over K, in the same order; a bias is added after the product (float
rounding). The lowering delegates the linear with a run-time weight (runtimes/executorch.py).

Measured on an Intel Xeon (AVX-512), 1 thread, 16 linears 512 -> 2048 -> 512 (67 MB), ms for x W^T /
for (W x^T)^T at M rows: 1: 4.43 / 7.48, 2: 5.09 / 7.44, 4: 5.34 / 7.50, 7: 5.49 / 7.46, 8: 9.02 / 7.47,
12: 8.98 / 7.51, 16: 10.24 / 7.54, 24: 11.86 / 10.95, 32: 13.28 / 10.20, 48: 16.39 / 14.53, 94: 26.67 /
23.17 (`python benchmarks/operators.py --rows`, results/xeon/fully_connected_rows.json): from 8 rows on.
In models, lowered for x86-avx512 with and without this rule, 1 / 2 threads (`python benchmarks/variants.py
--only transposed_linear`): pocket-tts's decoder step (16 rows) 9.03 -> 8.52 / 5.67 -> 5.43 ms, Vocos
(94) 23.95 -> 21.25 / 14.04 -> 12.71, Mimi's decoder on 25 frames (50) 89.6 -> 89.5 / 48.3 -> 47.5.
Not on an AMD Zen 5 (targets.py: x86-avx512-amd), where the run-time-weight operator reads its input
at 13.4 GB/s at any rows: 16 rows of the 67 MB, 4.28 ms as stored, 5.02 weight first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Skip

aten = torch.ops.aten
MIN_ROWS, MAX_ROWS = 8, 128  # measured above: it lost up to 7 rows, won from 8 to 94
MIN_FEATURES = 64  # a narrower weight (layer norm's averages: 1 output) is no stream to save


@dataclass(frozen=True)
class TransposedLinearPlan:
    node: Node
    rows: int


class TransposedLinearRule:
    """linear(x, W, b) of min_rows..max_rows rows -> linear(W, x as [M, K]) transposed, + b."""

    name = "transposed_linear"
    stage = 4  # after the rules that make linear layers (layer_norm, lstm, constant_operands, short_conv)

    def __init__(self, min_rows: int = MIN_ROWS, max_rows: int = MAX_ROWS):
        self.min_rows, self.max_rows = min_rows, max_rows

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.linear.default

    def check(self, node: Node, editor: ProgramEditor) -> TransposedLinearPlan | Skip:
        x, weight = node.args[0], node.args[1]
        if not (isinstance(weight, Node) and editor.is_constant_input(weight)):
            return Skip("the weight is not a constant of the program (quantized, or computed)")
        value = x.meta["val"]
        if value.dtype != torch.float32 or weight.meta["val"].dtype != torch.float32:
            return Skip(f"{value.dtype} linear: the run-time weight is XNNPACK's for float32 only")
        if not all(isinstance(size, int) for size in value.shape):
            return Skip(f"input of dynamic shape {list(value.shape)}")
        rows = math.prod(value.shape[:-1])
        if not self.min_rows <= rows <= self.max_rows:
            return Skip(f"{rows} rows: the weight-first product paid from {self.min_rows} to {self.max_rows} rows")
        out_features, in_features = weight.meta["val"].shape
        if min(out_features, in_features) < MIN_FEATURES:
            return Skip(f"a {out_features} x {in_features} weight: under {MIN_FEATURES} wide, no stream to save")
        return TransposedLinearPlan(node, rows)

    def describe(self, plan: TransposedLinearPlan) -> str:
        return f"weight-first product over {plan.rows} rows: W x^T, transposed"

    def apply(self, plan: TransposedLinearPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x, weight = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        shape = list(node.meta["val"].shape)
        value = x.meta["val"]
        if value.dim() != 2:  # a view of contiguous rows; rows laid out otherwise (an attention's heads) copied
            flatten = aten.view.default if value.is_contiguous() else aten.reshape.default
            x = editor.emit(node, flatten, x, [plan.rows, value.shape[-1]])
        product = editor.emit(node, aten.linear.default, weight, x)  # [N, M] = W x^T
        y = editor.emit(node, aten.permute.default, product, [1, 0])
        if bias is not None:
            y = editor.emit(node, aten.add.Tensor, y, bias)
        if len(shape) != 2:
            y = editor.emit(node, aten.view.default, y, shape)
        editor.replace([node], y)
