"""Scalar and low-rank constant operands of elementwise ops -> constants of the activation's rank.

`x * 1.4142` (a Python number) is lifted by ExecuTorch as a 0-d float32 tensor: in fp16 graphs a
portable cast runs outside the delegate, and a rank-0 operand drags an NHWC activation back to NCHW
inside it. `x + noise * strength` with a [H, W] noise map does the same. Here such an operand becomes
a lifted constant of the activation's dtype (for numbers) and rank, [1, ..., 1, H, W]; a low-rank
operand computed only from constants is evaluated once. Broadcasting gives the same values. In fp16
the number is rounded to fp16 first, exactly as ExecuTorch's own cast of the lifted scalar does
(eager PyTorch multiplies by the float32 value, a difference within one fp16 rounding).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
ELEMENTWISE = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor)
MIN_ACTIVATION_RANK = 3  # [N, C, L] and up: scalar arithmetic on shapes or small tensors is left alone


@dataclass(frozen=True)
class OperandPlan:
    node: Node
    index: int
    rank: int


def _low_rank_operand(node: Node) -> int | None:
    """Index of the operand to lift, if the node has a number or a lower-rank tensor operand."""
    rank = node.meta["val"].dim()
    for index, arg in enumerate(node.args[:2]):
        if isinstance(arg, numbers.Number) and not isinstance(arg, bool):
            return index
        if isinstance(arg, Node) and isinstance(arg.meta.get("val"), torch.Tensor) and arg.meta["val"].dim() < rank:
            return index
    return None


class ConstantOperandRule(Rule):
    name = "constant_operands"

    def matches(self, node: Node) -> bool:
        return (
            node.op == "call_function"
            and node.target in ELEMENTWISE
            and isinstance(node.meta.get("val"), torch.Tensor)
            and node.meta["val"].dim() >= MIN_ACTIVATION_RANK
            and _low_rank_operand(node) is not None
        )

    def check(self, node: Node, editor: ProgramEditor) -> OperandPlan | Skip:
        if node.kwargs.get("alpha", 1) != 1:
            return Skip("add/sub with alpha != 1")
        index = _low_rank_operand(node)
        operand, out = node.args[index], node.meta["val"]
        if isinstance(operand, Node):
            try:
                editor.constant_value(operand)
            except NotConstant as why:
                return Skip(f"the low-rank operand {operand.name} is not a constant: {why}")
        elif not out.dtype.is_floating_point:
            return Skip(f"{out.dtype} arithmetic: only floating point is rewritten")
        return OperandPlan(node, index, out.dim())

    def describe(self, plan: OperandPlan) -> str:
        operand = plan.node.args[plan.index]
        what = operand.name if isinstance(operand, Node) else repr(operand)
        return f"operand {what} as a rank-{plan.rank} constant"

    def apply(self, plan: OperandPlan, editor: ProgramEditor) -> None:
        operand = plan.node.args[plan.index]
        if isinstance(operand, Node):
            rank = plan.rank

            def lift(t: torch.Tensor) -> torch.Tensor:
                return t.reshape([1] * (rank - t.dim()) + list(t.shape))

            replacement = editor.derived_constant(operand, f"rank{rank}", lift)
        else:
            replacement = editor.scalar_constant(float(operand), plan.node)
        plan.node.update_arg(plan.index, replacement)
