"""slice_scatter -> cat of slices: a streaming decoder's overlap-add, in ops XNNPACK runs.

`y[..., :n] += partial` (a transposed convolution adding its held-back output) exports as
`slice_scatter(y, y[..., :n] + partial, dim, 0, n)`, which runs portable and splits the delegate.
With step 1 it is the same values as

    cat([base[:start], src, base[end:]], dim)        (empty pieces left out)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten


@dataclass(frozen=True)
class SliceScatterPlan:
    node: Node
    dim: int
    start: int
    end: int
    length: int


class SliceScatterRule(Rule):
    """aten.slice_scatter -> slice, cat."""

    name = "slice_scatter"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.slice_scatter.default

    def check(self, node: Node, editor: ProgramEditor) -> SliceScatterPlan | Skip:
        names = ("input", "src", "dim", "start", "end", "step")
        args = {**dict(zip(names, node.args)), **node.kwargs}
        base = args["input"].meta["val"]
        dim = args.get("dim", 0) % base.dim()
        length = base.shape[dim]
        if not isinstance(length, int):
            return Skip(f"dynamic length {length} on the scattered dimension")
        if args.get("step", 1) != 1:
            return Skip(f"step {args['step']}: only contiguous slices become a cat")
        start, end, _ = slice(args.get("start"), args.get("end")).indices(length)
        if args["src"].meta["val"].shape[dim] != max(end - start, 0):
            return Skip("the source does not fill the slice")
        return SliceScatterPlan(node, dim, start, end, length)

    def describe(self, plan: SliceScatterPlan) -> str:
        return f"cat of [0:{plan.start}], the source, [{plan.end}:{plan.length}] on dim {plan.dim}"

    def apply(self, plan: SliceScatterPlan, editor: ProgramEditor) -> None:
        node = plan.node
        base, src = node.args[0], node.args[1]
        pieces = []
        if plan.start > 0:
            pieces.append(editor.emit(node, aten.slice.Tensor, base, plan.dim, 0, plan.start))
        pieces.append(src)
        if plan.end < plan.length:
            pieces.append(editor.emit(node, aten.slice.Tensor, base, plan.dim, plan.end, plan.length))
        result = pieces[0] if len(pieces) == 1 else editor.emit(node, aten.cat.default, pieces, plan.dim)
        editor.replace([node], result)
