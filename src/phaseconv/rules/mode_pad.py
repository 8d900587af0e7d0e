"""Reflect padding -> slices of single steps and a concatenation, which XNNPACK runs.

ExecuTorch decomposes reflect padding into a gather whose indices it computes on every call
(arange, abs, sub, index): all portable, and one split of the partition per padded conv (EnCodec
pads every conv this way). Along each padded dimension of size L,

    reflect(x, l, r) = cat(x[l], x[l-1], ..., x[1], x, x[L-2], ..., x[L-1-r])

where x[i] is the one-step slice x[..., i:i+1, ...]: the same elements, moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Skip

aten = torch.ops.aten
REFLECTION_PADS = (aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)


@dataclass(frozen=True)
class ReflectPlan:
    node: Node
    pads: tuple[tuple[int, int, int], ...]  # (dim, before, after), last dimension first


def _padding(node: Node) -> list[int] | None:
    if node.target == aten.pad.default:
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
        return list(node.args[1]) if mode == "reflect" else None
    return list(node.args[1])


class ReflectPadRule:
    name = "reflect_pad"

    def matches(self, node: Node) -> bool:
        return (
            node.op == "call_function"
            and (node.target in REFLECTION_PADS or node.target == aten.pad.default)
            and _padding(node) is not None
        )

    def check(self, node: Node, editor: ProgramEditor) -> ReflectPlan | Skip:
        padding, shape = _padding(node), node.args[0].meta["val"].shape
        rank = len(shape)
        pads = []
        for index in range(0, len(padding), 2):
            dim, before, after = rank - 1 - index // 2, padding[index], padding[index + 1]
            if not isinstance(shape[dim], int):
                return Skip("dynamic shape: its edge slices would be of a dynamic-shaped tensor; XNNPACK slices none")
            if min(before, after) < 0:
                return Skip(f"negative padding ({before}, {after}) crops")
            if before or after:
                pads.append((dim, before, after))
        if node.args[0].meta["val"].dtype != torch.float32:
            return Skip("XNNPACK concatenates float32 here")
        return ReflectPlan(node, tuple(pads))

    def describe(self, plan: ReflectPlan) -> str:
        steps = sum(before + after for _, before, after in plan.pads)
        return f"{steps} one-step slices + cat"

    def apply(self, plan: ReflectPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x = node.args[0]
        for dim, before, after in plan.pads:
            length = x.meta["val"].shape[dim]
            parts = [editor.emit(node, aten.slice.Tensor, x, dim, i, i + 1) for i in range(before, 0, -1)]
            parts.append(x)
            ends = range(length - 2, length - 2 - after, -1)
            parts += [editor.emit(node, aten.slice.Tensor, x, dim, i, i + 1) for i in ends]
            x = editor.emit(node, aten.cat.default, parts, dim)
        editor.replace([node], x)
