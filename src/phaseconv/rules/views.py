"""squeeze / unsqueeze -> view, alias -> its input, select / unbind -> slice + view, split -> slices,
a functional copy of a same-shaped tensor -> that tensor: the same values, in a form XNNPACK takes.

XNNPACK's partitioner delegates unsqueeze only on the trailing dimension, and squeeze, alias
(what `x[..., :len]` of a whole dimension exports to), select (`x[..., 0]`) and unbind not at all:
StyleGAN2's styles[:, :, None, None], EnCodec's padding and RoPE's real/imaginary parts each split
the partition. A squeeze or unsqueeze is a view to the result's shape (one dynamic size inferred), an alias
is its input, and select(x, d, i) is view(slice(x, d, i, i + 1)) (unbind: one per index); split
(`chunk`, an adaptive layer norm's shift / scale / gate) is one slice per piece.
`copy(dst, src)` (what a state write `state[:] = x` functionalizes to) is `src` when both have one
shape and dtype; ExecuTorch would run it as a portable copy. A view to sizes read from the graph
(DAC's Snake: `x.reshape(B, C, -1)`, then back to `shape`) is a view to static sizes and -1.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor, inferred_shape
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
RESHAPES = (aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
SELECTS = (aten.select.int, aten.unbind.int)
SPLITS = (aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default)
TARGETS = (*RESHAPES, aten.alias.default, aten.copy.default, *SELECTS, *SPLITS)
# A view or reshape to sizes read from the graph (`x.reshape(x.shape)` of a dynamic x): ExecuTorch runs
# it outside the delegate (et_view); with its one dynamic size inferred (-1), XNNPACK runs it.
SIZED = (aten.view.default, aten.reshape.default)


@dataclass(frozen=True)
class ViewPlan:
    node: Node
    shape: tuple[int, ...]


class ViewRule(Rule):
    name = "views"

    def matches(self, node: Node) -> bool:
        if node.op != "call_function":
            return False
        return node.target in TARGETS or node.target in SIZED and any(isinstance(n, Node) for n in node.args[1])

    def check(self, node: Node, editor: ProgramEditor) -> ViewPlan | Skip:
        whole = node.target in SELECTS or node.target in SPLITS  # the plan keeps the input's shape
        shape = tuple(node.args[0].meta["val"].shape if whole else node.meta["val"].shape)
        dynamic = sum(not isinstance(size, int) for size in shape)
        if dynamic and whole or dynamic > 1 and node.target in (*RESHAPES, *SIZED):
            return Skip(f"dynamic shape {list(shape)}: a view infers only one size")
        shape = tuple(inferred_shape(shape))
        if node.target == aten.copy.default:
            dst, src = (arg.meta["val"] for arg in node.args[:2])
            if dst.shape != src.shape or dst.dtype != src.dtype:
                return Skip(
                    f"a copy that broadcasts or casts ({list(src.shape)} {src.dtype} into {list(dst.shape)} "
                    f"{dst.dtype})"
                )
        if node.target in (aten.unbind.int, *SPLITS) and any(user.target != operator.getitem for user in node.users):
            return Skip(f"the {'unbound' if node.target == aten.unbind.int else 'split'} tuple is read as a whole")
        return ViewPlan(node, shape)

    def describe(self, plan: ViewPlan) -> str:
        if plan.node.target == aten.alias.default:
            return "its input"
        if plan.node.target == aten.copy.default:
            return "the copied tensor"
        if plan.node.target in SELECTS:
            return "slice + view"
        if plan.node.target in SPLITS:
            return "one slice per piece"
        if plan.node.target in SIZED:
            return f"view to {list(plan.shape)} (sizes no longer read from the graph)"
        return f"view to {list(plan.shape)}"

    def apply(self, plan: ViewPlan, editor: ProgramEditor) -> None:
        node = plan.node
        if node.target == aten.alias.default:
            editor.replace([node], node.args[0])
        elif node.target == aten.copy.default:
            editor.replace([node], node.args[1])
        elif node.target == aten.select.int:
            editor.replace([node], _select(editor, node, node.args[0], node.args[1], node.args[2], plan.shape))
        elif node.target == aten.unbind.int:
            dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
            for user in list(node.users):
                editor.replace([user], _select(editor, user, node.args[0], dim, user.args[1], plan.shape))
        elif node.target in SPLITS:
            dim = (node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)) % len(plan.shape)
            sizes = node.args[1]
            if node.target == aten.chunk.default:  # n chunks: pieces of ceil(size / n)
                sizes = -(-plan.shape[dim] // sizes)
            if isinstance(sizes, int):  # split.Tensor: pieces of that size, the last one shorter
                sizes = [min(sizes, plan.shape[dim] - start) for start in range(0, plan.shape[dim], sizes)]
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            for user in list(node.users):
                start = starts[user.args[1]]
                piece = editor.emit(user, aten.slice.Tensor, node.args[0], dim, start, start + sizes[user.args[1]])
                editor.replace([user], piece)
        else:
            editor.replace([node], editor.emit(node, aten.view.default, node.args[0], list(plan.shape)))


def _select(editor: ProgramEditor, anchor: Node, x: Node, dim: int, index: int, shape: tuple[int, ...]) -> Node:
    """x.select(dim, index) as view(slice(x, dim, index, index + 1)), for x of static `shape`."""
    dim %= len(shape)
    index %= shape[dim]
    piece = editor.emit(anchor, aten.slice.Tensor, x, dim, index, index + 1)
    return editor.emit(anchor, aten.view.default, piece, [*shape[:dim], *shape[dim + 1 :]])
