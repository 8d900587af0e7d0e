"""Rotary embedding's rotate_half of a dynamic length -> one matmul by a signed permutation.

rotate_half(x) = cat(-x[..., h:], x[..., :h]) (transformers' RoPE, Mimi's transformer). XNNPACK
slices only tensors of static shape, so with a dynamic length both slices and the cat run outside
the delegate and split it, twice per attention layer. The same map is x @ R with the constant

    R[h + i, i] = -1,  R[i, h + i] = 1  (zero elsewhere),

one delegated linear layer. Each output is one product by +-1 plus exact zeros: the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten


@dataclass(frozen=True)
class RotateHalfPlan:
    node: Node
    source: Node
    half: int


def rotation(half: int, dtype: torch.dtype) -> torch.Tensor:
    """R as a linear layer's weight [out, in] (R^T): out[:h] = -x[h:], out[h:] = x[:h]."""
    eye = torch.eye(half, dtype=dtype)
    zero = torch.zeros(half, half, dtype=dtype)
    return torch.cat([torch.cat([zero, -eye], 1), torch.cat([eye, zero], 1)], 0)


def last_dim_slice(node: Node) -> tuple[Node, int, int] | None:
    """(x, start, end) when `node` is x[..., start:end] with step 1."""
    if node.op != "call_function" or node.target != aten.slice.Tensor:
        return None
    source = node.args[0]
    rank = source.meta["val"].dim()
    dim, start = node.args[1] % rank, node.args[2] if len(node.args) > 2 else 0
    end, step = node.args[3] if len(node.args) > 3 else None, node.args[4] if len(node.args) > 4 else 1
    if dim != rank - 1 or step != 1:
        return None
    return source, start, end


class RotateHalfRule(Rule):
    """cat([-x[..., h:], x[..., :h]], -1) -> linear(x, R^T)."""

    name = "rotate_half"

    def matches(self, node: Node) -> bool:
        if node.op != "call_function" or node.target != aten.cat.default or len(node.args[0]) != 2:
            return False
        negated, kept = node.args[0]
        return (
            isinstance(negated, Node)
            and negated.target == aten.neg.default
            and last_dim_slice(negated.args[0]) is not None
            and isinstance(kept, Node)
            and last_dim_slice(kept) is not None
        )

    def check(self, node: Node, editor: ProgramEditor) -> RotateHalfPlan | Skip:
        negated, kept = node.args[0]
        source, start, end = last_dim_slice(negated.args[0])
        other, other_start, other_end = last_dim_slice(kept)
        value = source.meta["val"]
        width, rank = value.shape[-1], value.dim()
        dim = node.args[1] if len(node.args) > 1 else 0
        if other is not source or dim % rank != rank - 1 or not isinstance(width, int) or width % 2:
            return Skip("not rotate_half: the halves of one tensor's even last dimension, swapped, one negated")
        half = width // 2
        if (start, other_start, other_end) != (half, 0, half) or end not in (width, None) and end < width:
            return Skip("not rotate_half: the halves of one tensor's even last dimension, swapped, one negated")
        if all(isinstance(size, int) for size in value.shape):
            return Skip("static shape: XNNPACK runs these slices and the cat itself")
        if not value.dtype.is_floating_point:
            return Skip(f"{value.dtype}: the matmul form is for floating point")
        return RotateHalfPlan(node, source, half)

    def describe(self, plan: RotateHalfPlan) -> str:
        return f"x @ R, R a signed permutation of {2 * plan.half}"

    def apply(self, plan: RotateHalfPlan, editor: ProgramEditor) -> None:
        weight = rotation(plan.half, plan.source.meta["val"].dtype)
        constant = editor.new_constant(weight, f"{plan.node.name}_rotation")
        editor.replace([plan.node], editor.emit(plan.node, aten.linear.default, plan.source, constant))
