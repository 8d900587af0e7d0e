"""squeeze / unsqueeze -> view, alias -> its input: the same tensor, in a form XNNPACK takes.

XNNPACK's partitioner delegates unsqueeze only on the trailing dimension, and squeeze and alias
(what `x[..., :len]` of a whole dimension exports to) not at all: StyleGAN2's styles[:, :, None,
None] and EnCodec's padding each split the partition. With static shapes a squeeze or unsqueeze
is a view to the result's shape, and an alias is its input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Skip

aten = torch.ops.aten
TARGETS = (aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.alias.default)


@dataclass(frozen=True)
class ViewPlan:
    node: Node
    shape: tuple[int, ...]


class ViewRule:
    name = "views"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target in TARGETS

    def check(self, node: Node, editor: ProgramEditor) -> ViewPlan | Skip:
        shape = tuple(node.meta["val"].shape)
        if not all(isinstance(size, int) for size in shape):
            return Skip("dynamic shape")
        return ViewPlan(node, shape)

    def describe(self, plan: ViewPlan) -> str:
        return "its input" if plan.node.target == aten.alias.default else f"view to {list(plan.shape)}"

    def apply(self, plan: ViewPlan, editor: ProgramEditor) -> None:
        node = plan.node
        if node.target == aten.alias.default:
            editor.replace([node], node.args[0])
        else:
            editor.replace([node], editor.emit(node, aten.view.default, node.args[0], list(plan.shape)))
