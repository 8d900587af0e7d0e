"""A slice of a cat -> the pieces it covers: the copies a streaming overlap-add makes, made once.

A streaming transposed convolution adds its held-back output into the first samples, subtracts the
bias from the samples it holds back and cuts them off: after `slice_scatter` becomes `cat`, that is
a cat of slices of a cat, each a full copy of the activation. Along the cat's dimension, with
pieces of static sizes starting at o_0 < o_1 < ...,

    cat(pieces)[start:end] = cat([piece_i[max(start - o_i, 0) : min(end, o_{i+1}) - o_i] for covered i])

which is one piece itself (no copy), a slice of one piece, or a shorter cat. It runs after the
rewrites (stage 2), on the cats they emit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten


@dataclass(frozen=True)
class SliceOfCatPlan:
    node: Node
    dim: int
    windows: list[tuple[int, int, int, int]]  # (piece index, start, stop, piece length)


class SliceOfCatRule(Rule):
    """slice(cat(pieces), d) along the cat's dimension -> the covered pieces."""

    name = "slice_of_cat"
    stage = 2

    def matches(self, node: Node) -> bool:
        return (
            node.op == "call_function"
            and node.target == aten.slice.Tensor
            and isinstance(node.args[0], Node)
            and node.args[0].target == aten.cat.default
        )

    def check(self, node: Node, editor: ProgramEditor) -> SliceOfCatPlan | Skip:
        cat = node.args[0]
        rank = cat.meta["val"].dim()
        cat_dim = (cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)) % rank
        dim = (node.args[1] if len(node.args) > 1 else 0) % rank
        if dim != cat_dim:
            return Skip("the slice is on another dimension than the cat")
        step = node.args[4] if len(node.args) > 4 else 1
        if step != 1:
            return Skip(f"step {step}")
        sizes = [piece.meta["val"].shape[dim] for piece in cat.args[0]]
        if not all(isinstance(size, int) for size in sizes):
            return Skip("dynamic piece lengths")
        start = node.args[2] if len(node.args) > 2 else None
        end = node.args[3] if len(node.args) > 3 else None
        if not all(isinstance(v, (int, type(None))) for v in (start, end)):
            return Skip("dynamic slice bounds")
        start, end, _ = slice(start, end).indices(sum(sizes))
        windows, offset = [], 0
        for index, size in enumerate(sizes):
            lo, hi = max(start, offset), min(end, offset + size)
            if lo < hi:
                windows.append((index, lo - offset, hi - offset, size))
            offset += size
        if not windows:
            return Skip("an empty slice")
        return SliceOfCatPlan(node, dim, windows)

    def describe(self, plan: SliceOfCatPlan) -> str:
        whole = sum(stop - start == size for _, start, stop, size in plan.windows)
        return f"{len(plan.windows)} covered piece(s) of the cat, {whole} whole"

    def apply(self, plan: SliceOfCatPlan, editor: ProgramEditor) -> None:
        node = plan.node
        pieces = node.args[0].args[0]  # read now: an earlier clean-up may have replaced a piece
        covered = []
        for index, start, stop, size in plan.windows:
            piece = pieces[index]
            if (start, stop) != (0, size):
                piece = editor.emit(node, aten.slice.Tensor, piece, plan.dim, start, stop)
            covered.append(piece)
        result = covered[0] if len(covered) == 1 else editor.emit(node, aten.cat.default, covered, plan.dim)
        editor.replace([node], result)
