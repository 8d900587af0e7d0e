"""A linear layer over a few rows -> the same products with the weight as the left operand:

    y = x W^T + b   ->   y = (W x^T)^T + b     (x: [M, K] rows, W: [N, K] a constant)

XNNPACK's fully connected operator tiles its M rows by 7 on AVX-512 (its f32 GEMM kernel is 7x16)
and streams the whole packed weight past each tile: 8-14 rows read the weight twice, 16 three times.
With W as the operator's input and x as its weight (a run-time weight, packed at each call: M x K
floats), W is read once in tiles of 7 of its N rows and x^T (16 columns: one tile) stays in cache.
Each output is the same sum over K, in the same order; a bias is added after the product (float
rounding). The lowering delegates the linear with a run-time weight (runtimes/executorch.py).

On an Intel Xeon with AVX-512 the weight-first form wins from 8 rows on and loses below
(`python benchmarks/operators.py --rows` times both per row count; `benchmarks/variants.py --only
transposed_linear` the models). Not on an AMD Zen 5 (targets.py: x86-avx512-amd), where the
run-time-weight operator streams its input slower than the stored weight at any row count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor, weighted_operands
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
MIN_ROWS, MAX_ROWS = 8, 128  # below 8 rows one tile reads the weight once anyway
MIN_FEATURES = 64  # a narrower weight (layer norm's averages: 1 output) is no stream to save


@dataclass(frozen=True)
class TransposedLinearPlan:
    node: Node
    rows: int


class TransposedLinearRule(Rule):
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
        x, weight, bias = weighted_operands(node)
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
