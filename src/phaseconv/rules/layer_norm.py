"""LayerNorm over the last dimension -> operators XNNPACK runs (it has no layer norm: portable).

    mean = x @ (1/C)        var = (x - mean)^2 @ (1/C)        y = (x - mean) * rsqrt(var + eps) * w + b

The two averages are fully connected layers with a constant [1, C] weight of 1/C, which XNNPACK
runs at any rank (its mean operator only averages the inner dimensions of 4-D tensors).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.mean import last_dim_variance

aten = torch.ops.aten


@dataclass(frozen=True)
class LayerNormPlan:
    node: Node
    output: Node  # the node whose users receive the normalized tensor
    weight: Node | None
    bias: Node | None
    eps: float


def normalized_output(node: Node, editor: ProgramEditor, weight, bias, native, native_name: str) -> Node | Skip:
    """The node that holds a norm's normalized values (the norm itself, or item 0 of its `native`
    form), or why it is left alone: an affine weight or bias that is not a constant, a mean or rstd read."""
    for tensor, role in ((weight, "weight"), (bias, "bias")):
        if tensor is not None:
            try:
                editor.constant_value(tensor)
            except NotConstant as why:
                return Skip(f"the {role} is not a constant: {why}")
    if node.target != native:
        return node
    users = list(node.users)
    if len(users) != 1 or users[0].target != operator.getitem or users[0].args[1] != 0:
        return Skip(f"the mean or rstd of {native_name} is used: only the normalized output is rewritten")
    return users[0]


class LayerNormRule(Rule):
    name = "layer_norm"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target in (aten.layer_norm.default, aten.native_layer_norm.default)

    def check(self, node: Node, editor: ProgramEditor) -> LayerNormPlan | Skip:
        x, shape = node.args[0], node.args[1]
        weight = node.args[2] if len(node.args) > 2 else None
        bias = node.args[3] if len(node.args) > 3 else None
        eps = node.args[4] if len(node.args) > 4 else 1e-5
        if len(shape) != 1:
            return Skip(f"normalized over {len(shape)} dimensions: only the last one is rewritten")
        value = x.meta["val"]
        if value.dtype not in (torch.float32, torch.float16):
            return Skip(f"{value.dtype} input: XNNPACK runs float32 and float16")
        if not isinstance(value.shape[-1], int):
            return Skip("dynamic normalized dimension")
        output = normalized_output(node, editor, weight, bias, aten.native_layer_norm.default, "native_layer_norm")
        if isinstance(output, Skip):
            return output
        return LayerNormPlan(node, output, weight, bias, float(eps))

    def describe(self, plan: LayerNormPlan) -> str:
        return "two fully connected averages + rsqrt, all delegated"

    def apply(self, plan: LayerNormPlan, editor: ProgramEditor) -> None:
        node, anchor = plan.node, plan.output
        x = node.args[0]
        rank = x.meta["val"].dim()
        channels = x.meta["val"].shape[-1]
        centered, variance = last_dim_variance(editor, anchor, x, node.name)
        variance = editor.emit(anchor, aten.add.Tensor, variance, editor.scalar_constant(plan.eps, x))
        y = editor.emit(anchor, aten.mul.Tensor, centered, editor.emit(anchor, aten.rsqrt.default, variance))

        def as_rank(t: torch.Tensor) -> torch.Tensor:
            return t.reshape([1] * (rank - 1) + [channels])

        if plan.weight is not None:
            y = editor.emit(anchor, aten.mul.Tensor, y, editor.derived_constant(plan.weight, f"rank{rank}", as_rank))
        if plan.bias is not None:
            y = editor.emit(anchor, aten.add.Tensor, y, editor.derived_constant(plan.bias, f"rank{rank}", as_rank))
        editor.replace([node] if anchor is node else [node, anchor], y)
