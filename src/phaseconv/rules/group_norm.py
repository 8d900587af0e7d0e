"""Group norm -> per-channel averages and a group average, which XNNPACK runs (it has no group norm:
`native_group_norm` runs portable and splits the delegate, once per norm of a VAE decoder or U-Net).

For x [N, C, *S] in G groups of C/G channels, per group g and with m_c the mean of channel c over S:

    mean_g = avg_{c in g} m_c                    var_g = avg_{c in g} avg_S (x_c - mean_g)^2
    y_c = (x_c - mean_g) * (rsqrt(var_g + eps) * w_c) + b_c

Two passes for the statistics; the scale rsqrt * w is taken on [N, C] values first, as PyTorch's
kernel does, so the affine is one product and one sum over x. The spatial averages are XNNPACK's
global average pooling (4-D) or a fully connected layer of weight 1/T (3-D); the group averages act
on [N, C] values only: a view to [N, G, C/G], a fully connected average, and a product with ones to
give each channel its group's value back.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.layer_norm import normalized_output
from phaseconv.rules.mean import last_dim_mean

aten = torch.ops.aten


@dataclass(frozen=True)
class GroupNormPlan:
    node: Node
    output: Node  # the node whose users receive the normalized tensor
    groups: int
    weight: Node | None
    bias: Node | None
    eps: float


def _arguments(node: Node) -> tuple[int, Node | None, Node | None, float]:
    """(groups, weight, bias, eps) of group_norm or native_group_norm."""
    if node.target == aten.group_norm.default:
        args = dict(zip(("input", "num_groups", "weight", "bias", "eps"), node.args)) | node.kwargs
        return args["num_groups"], args.get("weight"), args.get("bias"), float(args.get("eps", 1e-5))
    _, weight, bias, _, _, _, groups, eps = node.args
    return groups, weight, bias, float(eps)


class GroupNormRule(Rule):
    """`averages_as_linear`: the averages over a last dimension (the groups', a 1-D norm's over time)
    as a fully connected layer of weight 1/n, which XNNPACK runs (its mean averages only the inner
    dimensions of 4-D tensors); False: as `mean` (LiteRT: litert-torch converts no linear over
    [N, G, C/G])."""

    name = "group_norm"

    def __init__(self, averages_as_linear: bool = True):
        self.averages_as_linear = averages_as_linear

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target in (aten.group_norm.default, aten.native_group_norm.default)

    def check(self, node: Node, editor: ProgramEditor) -> GroupNormPlan | Skip:
        value = node.args[0].meta["val"]
        groups, weight, bias, eps = _arguments(node)
        if value.dim() not in (3, 4):
            return Skip(f"a {value.dim()}-D input: 1-D (N, C, T) and 2-D (N, C, H, W) group norms are rewritten")
        if value.dtype not in (torch.float32, torch.float16):
            return Skip(f"{value.dtype} input: XNNPACK runs float32 and float16")
        if not all(isinstance(size, int) for size in value.shape):
            return Skip("dynamic sizes")
        output = normalized_output(node, editor, weight, bias, aten.native_group_norm.default, "native_group_norm")
        if isinstance(output, Skip):
            return output
        return GroupNormPlan(node, output, groups, weight, bias, eps)

    def describe(self, plan: GroupNormPlan) -> str:
        return f"{plan.groups} groups: spatial and group averages, rsqrt, affine, all delegated"

    def apply(self, plan: GroupNormPlan, editor: ProgramEditor) -> None:
        node, anchor = plan.node, plan.output
        x = node.args[0]
        shape = list(x.meta["val"].shape)
        batch, channels = shape[:2]
        per_group = channels // plan.groups

        def average(t: Node, key: str) -> Node:
            """The mean over t's last dimension, kept as size 1."""
            if self.averages_as_linear:
                return last_dim_mean(editor, anchor, t, key)
            return editor.emit(anchor, aten.mean.dim, t, [-1], True)

        def spatial_mean(t: Node) -> Node:
            if len(shape) == 4:  # XNNPACK's global average pooling
                return editor.emit(anchor, aten.mean.dim, t, [-2, -1], True)
            return average(t, f"{node.name}_time")

        ones = editor.new_constant(torch.ones(1, 1, per_group, dtype=x.meta["val"].dtype), f"{node.name}_spread")

        def group_mean(per_channel: Node) -> Node:
            """[N, C, 1(, 1)] channel averages -> each channel's group average, same shape."""
            grouped = editor.emit(anchor, aten.view.default, per_channel, [batch, plan.groups, per_group])
            spread = editor.emit(anchor, aten.mul.Tensor, average(grouped, f"{node.name}_group"), ones)
            return editor.emit(anchor, aten.view.default, spread, [batch, channels] + [1] * (len(shape) - 2))

        centered = editor.emit(anchor, aten.sub.Tensor, x, group_mean(spatial_mean(x)))
        squared = editor.emit(anchor, aten.mul.Tensor, centered, centered)
        variance = group_mean(spatial_mean(squared))
        variance = editor.emit(anchor, aten.add.Tensor, variance, editor.scalar_constant(plan.eps, variance))
        scale = editor.emit(anchor, aten.rsqrt.default, variance)

        def per_channel(t: torch.Tensor) -> torch.Tensor:
            return t.reshape([1, channels] + [1] * (len(shape) - 2))

        if plan.weight is not None:  # on [N, C] values, then one pass over x
            weight = editor.derived_constant(plan.weight, "per_channel", per_channel)
            scale = editor.emit(anchor, aten.mul.Tensor, scale, weight)
        y = editor.emit(anchor, aten.mul.Tensor, centered, scale)
        if plan.bias is not None:
            y = editor.emit(anchor, aten.add.Tensor, y, editor.derived_constant(plan.bias, "per_channel", per_channel))
        editor.replace([node] if anchor is node else [node, anchor], y)
