"""ELU -> relu(x) + alpha * (exp(min(x, 0)) - 1): operators XNNPACK delegates (ELU runs portable).

For x > 0 the second term is alpha * (exp(0) - 1) = 0 exactly; for x <= 0 the first is 0.

XNNPACK has an ELU of its own, and ExecuTorch 1.5.1 ships its partitioner config (EluConfig) but
leaves it out of the default list. `phaseconv.lower` adds it (fp32 and int8), which runs one pass
instead of five (benchmarks/variants.py on the Mimi-like demo decoder): there the
rule is built with `xnnpack_elu=True` and leaves fp32 ELU to XNNPACK. For a program lowered with the
stock partitioner, the default rule decomposes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten


@dataclass(frozen=True)
class EluPlan:
    node: Node
    alpha: float


class EluRule(Rule):
    """aten.elu -> relu, clamp, exp, mul, sub, add."""

    name = "elu"

    def __init__(self, xnnpack_elu: bool = False):
        self.xnnpack_elu = xnnpack_elu  # the lowering delegates fp32 ELU itself (EluConfig)

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.elu.default

    def check(self, node: Node, editor: ProgramEditor) -> EluPlan | Skip:
        alpha, scale, input_scale = (list(node.args[1:]) + [1.0, 1.0, 1.0])[:3]
        alpha = node.kwargs.get("alpha", alpha)
        if node.kwargs.get("scale", scale) != 1 or node.kwargs.get("input_scale", input_scale) != 1:
            return Skip("ELU with scale or input_scale other than 1 (SELU-like) is not rewritten")
        dtype = node.args[0].meta["val"].dtype
        if dtype not in (torch.float32, torch.float16):
            return Skip(f"ELU in {dtype}: XNNPACK runs float32 and float16 only")
        if self.xnnpack_elu and dtype == torch.float32:
            return Skip("XNNPACK runs this ELU itself (phaseconv.lower enables the delegate's ELU)")
        return EluPlan(node, float(alpha))

    def describe(self, plan: EluPlan) -> str:
        return f"relu(x) + {plan.alpha:g} * (exp(min(x, 0)) - 1)"

    def apply(self, plan: EluPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x = node.args[0]
        positive = editor.emit(node, aten.relu.default, x)
        negative = editor.emit(node, aten.exp.default, editor.emit(node, aten.clamp.default, x, None, 0.0))
        alpha = editor.scalar_constant(plan.alpha, x)
        if plan.alpha != 1.0:
            negative = editor.emit(node, aten.mul.Tensor, negative, alpha)
        negative = editor.emit(node, aten.sub.Tensor, negative, alpha)
        editor.replace([node], editor.emit(node, aten.add.Tensor, positive, negative))
