"""Mean over the last dimension -> a fully connected layer with a constant [1, C] weight of 1/C.

XNNPACK's mean only averages the inner dimensions of 4-D tensors; StyleGAN's pixel norm
(z.square().mean(dim=1)) and other last-dimension means of 2-D and 3-D tensors run portable.
sum_c x_c * (1/C) equals the mean up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten


def last_dim_mean(editor: ProgramEditor, anchor: Node, x: Node, key: str) -> Node:
    """linear(x, W) with W = [1, C] of 1/C: the mean over the last dimension, kept as size 1.

    One constant per key: reading the same x twice (layer norm's two averages) shares it.
    """
    val = x.meta["val"]
    weight = torch.full((1, val.shape[-1]), 1.0 / val.shape[-1], dtype=val.dtype)
    return editor.emit(anchor, aten.linear.default, x, editor.new_constant(weight, f"{key}_average"))


def last_dim_variance(editor: ProgramEditor, anchor: Node, x: Node, key: str) -> tuple[Node, Node]:
    """(x - mean, mean((x - mean)^2)) over the last dimension, as two fully connected averages."""
    centered = editor.emit(anchor, aten.sub.Tensor, x, last_dim_mean(editor, anchor, x, key))
    return centered, last_dim_mean(editor, anchor, editor.emit(anchor, aten.mul.Tensor, centered, centered), key)


@dataclass(frozen=True)
class MeanPlan:
    node: Node
    channels: int
    keepdim: bool


class MeanRule(Rule):
    name = "mean"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.mean.dim

    def check(self, node: Node, editor: ProgramEditor) -> MeanPlan | Skip:
        x = node.args[0].meta["val"]
        dims = node.args[1] if len(node.args) > 1 else None
        keepdim = bool(node.args[2]) if len(node.args) > 2 else bool(node.kwargs.get("keepdim", False))
        if node.kwargs.get("dtype") is not None:
            return Skip("mean with a dtype")
        if x.dim() == 4:
            return Skip("4-D: XNNPACK averages the inner dimensions itself")
        if dims is None or len(dims) != 1 or dims[0] % x.dim() != x.dim() - 1:
            return Skip(f"over dims {dims}: only a mean over the last dimension is rewritten")
        if x.dtype not in (torch.float32, torch.float16) or not isinstance(x.shape[-1], int):
            return Skip(f"{x.dtype} or dynamic last dimension")
        return MeanPlan(node, x.shape[-1], keepdim)

    def describe(self, plan: MeanPlan) -> str:
        return f"fully connected with weight 1/{plan.channels}"

    def apply(self, plan: MeanPlan, editor: ProgramEditor) -> None:
        node = plan.node
        mean = last_dim_mean(editor, node, node.args[0], node.name)
        if not plan.keepdim:
            mean = editor.emit(node, aten.view.default, mean, list(node.meta["val"].shape))
        editor.replace([node], mean)
