"""Reflect, replicate and circular padding -> slices and a concatenation, which XNNPACK runs.

ExecuTorch decomposes these paddings into a gather whose indices it computes on every call
(arange, abs or clamp, sub, index): all portable, and one split of the partition per padded conv
(EnCodec pads every conv by reflection; the anti-aliased activations of recent GAN vocoders by
replication). Along each padded dimension of size L, with x[i] the one-step slice x[..., i:i+1, ...]:

    reflect(x, l, r)   = cat(x[l], ..., x[1], x, x[L-2], ..., x[L-1-r])
    replicate(x, l, r) = cat(x[0] (l times), x, x[L-1] (r times))
    circular(x, l, r)  = cat(x[L-l:L], x, x[0:r])

the same elements, moved. Each repeated step is its own slice: XNNPACK concatenates distinct inputs only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
MODES = ("reflect", "replicate", "circular")
REFLECTION_PADS = (aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)
REPLICATION_PADS = (aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default)


@dataclass(frozen=True)
class ModePadPlan:
    node: Node
    mode: str
    pads: tuple[tuple[int, int, int], ...]  # (dim, before, after), last dimension first


def _mode_and_padding(node: Node) -> tuple[str, list[int]] | None:
    if node.target == aten.pad.default:
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
        return (mode, list(node.args[1])) if mode in MODES else None
    return ("reflect" if node.target in REFLECTION_PADS else "replicate"), list(node.args[1])


class ModePadRule(Rule):
    """`modes`: the padding modes rewritten (export_onnx takes reflect only: measured to pay there)."""

    name = "mode_pad"

    def __init__(self, modes: tuple[str, ...] = MODES):
        self.modes = modes

    def matches(self, node: Node) -> bool:
        if node.op != "call_function" or node.target not in (aten.pad.default, *REFLECTION_PADS, *REPLICATION_PADS):
            return False
        found = _mode_and_padding(node)
        return found is not None and found[0] in self.modes

    def check(self, node: Node, editor: ProgramEditor) -> ModePadPlan | Skip:
        mode, padding = _mode_and_padding(node)
        shape = node.args[0].meta["val"].shape
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
        return ModePadPlan(node, mode, tuple(pads))

    def describe(self, plan: ModePadPlan) -> str:
        return f"{plan.mode} padding as slices + cat"

    def apply(self, plan: ModePadPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x = node.args[0]

        def piece(source: Node, dim: int, start: int, end: int) -> Node:
            return editor.emit(node, aten.slice.Tensor, source, dim, start, end)

        for dim, before, after in plan.pads:
            length = x.meta["val"].shape[dim]
            if plan.mode == "reflect":
                head = [piece(x, dim, i, i + 1) for i in range(before, 0, -1)]
                tail = [piece(x, dim, i, i + 1) for i in range(length - 2, length - 2 - after, -1)]
            elif plan.mode == "replicate":
                head = [piece(x, dim, 0, 1) for _ in range(before)]
                tail = [piece(x, dim, length - 1, length) for _ in range(after)]
            else:
                head = [piece(x, dim, length - before, length)] if before else []
                tail = [piece(x, dim, 0, after)] if after else []
            x = editor.emit(node, aten.cat.default, [*head, x, *tail], dim)
        editor.replace([node], x)
