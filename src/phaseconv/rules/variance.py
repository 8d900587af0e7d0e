"""Variance over the last dimension -> two fully connected averages (XNNPACK has no variance: portable).

    var(x) = mean((x - mean(x))^2) * C / (C - correction)

as layer norm's rewrite computes it (rules/layer_norm.py): the flow head of pocket-tts normalizes
with `x.var(dim=-1)` (its LayerNorm and RMSNorm), which ExecuTorch runs outside the delegate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.mean import last_dim_variance

aten = torch.ops.aten


@dataclass(frozen=True)
class VariancePlan:
    node: Node
    correction: float
    keepdim: bool


def _arguments(node: Node) -> tuple[list | None, float, bool]:
    """(dims, correction, keepdim) of var.dim (unbiased) or var.correction."""
    args = dict(zip(("input", "dim", "unbiased_or_correction", "keepdim"), node.args)) | node.kwargs
    if node.target == aten.var.dim:
        correction = 1.0 if args.get("unbiased_or_correction", args.get("unbiased", True)) else 0.0
    else:
        correction = args.get("correction")
        correction = 1.0 if correction is None else float(correction)
    return args.get("dim"), correction, bool(args.get("keepdim", False))


class VarianceRule(Rule):
    name = "variance"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target in (aten.var.dim, aten.var.correction)

    def check(self, node: Node, editor: ProgramEditor) -> VariancePlan | Skip:
        x = node.args[0].meta["val"]
        dims, correction, keepdim = _arguments(node)
        if dims is None or len(dims) != 1 or dims[0] % x.dim() != x.dim() - 1:
            return Skip(f"over dims {dims}: only a variance over the last dimension is rewritten")
        if x.dtype not in (torch.float32, torch.float16) or not isinstance(x.shape[-1], int):
            return Skip(f"{x.dtype} or dynamic last dimension")
        if x.shape[-1] <= correction:
            return Skip(f"{x.shape[-1]} values with correction {correction}: no variance to compute")
        return VariancePlan(node, correction, keepdim)

    def describe(self, plan: VariancePlan) -> str:
        return "two fully connected averages" + (f", times C / (C - {plan.correction:g})" if plan.correction else "")

    def apply(self, plan: VariancePlan, editor: ProgramEditor) -> None:
        node = plan.node
        x = node.args[0]
        _, variance = last_dim_variance(editor, node, x, node.name)
        if plan.correction:
            channels = x.meta["val"].shape[-1]
            factor = editor.scalar_constant(channels / (channels - plan.correction), x)
            variance = editor.emit(node, aten.mul.Tensor, variance, factor)
        if not plan.keepdim:
            variance = editor.emit(node, aten.view.default, variance, list(node.meta["val"].shape))
        editor.replace([node], variance)
