"""A 1-D convolution's taps that read only zero padding -> dropped, with the padding they needed.

A causal decoder run on a short input reads mostly padding: Mimi's first convolution after its
transformer (k7, 6 zeros padded before) decodes one 80 ms frame as 2 steps, so each output reads at
most 2 real samples, and taps 0-4 (most of its weights) only ever multiply zeros. With
stride s, dilation d, left padding p and T outputs, tap j reads positions t*s + j*d - p, t < T, of
the unpadded input of length L: it reads only padding when

    (T - 1)*s + j*d - p < 0        (before the input, for every output)   or   j*d - p >= L (after it).

Those taps form a run at each end of the kernel; the convolution keeps taps j0..j1, with left
padding p - j0*d and right padding up to the last position tap j1 reads. Exact: the dropped
products are 0 * w, zeros (the weights are checked finite), so every sum keeps its terms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.padding import PADS, constant_mode, fill_value
from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten


@dataclass(frozen=True)
class PaddedTapsPlan:
    node: Node
    source: Node  # the unpadded input
    taps: tuple[int, int]  # first and last tap kept
    padding: tuple[int, int]  # the padding those taps read


def _stride_dilation(node: Node) -> tuple[int, int]:
    """conv1d's stride and dilation (arguments 3 and 5, 1 when left out)."""
    return tuple(node.args[i][0] if len(node.args) > i else 1 for i in (3, 5))


def _zero_padding(node: Node) -> tuple[Node, int, int] | None:
    """(unpadded input, before, after) of a conv1d's input, counting its own `padding` argument."""
    x = node.args[0]
    own = node.args[4][0] if len(node.args) > 4 else 0
    if not isinstance(own, int):  # "same" / "valid"
        return None
    if x.op == "call_function" and x.target in PADS and len(x.args[1]) == 2:
        if not constant_mode(x) or fill_value(x) != 0 or not all(isinstance(p, int) for p in x.args[1]):
            return None  # another fill, or widths computed in the graph
        before, after = x.args[1]
        return x.args[0], before + own, after + own
    return x, own, own


def _kept_taps(node: Node) -> tuple[Node, tuple[int, int], tuple[int, int]] | None:
    """(unpadded input, (j0, j1), (before, after)) when taps read only padding, else None."""
    padded = _zero_padding(node)
    if padded is None:
        return None
    source, before, after = padded
    length, outputs = source.meta["val"].shape[-1], node.meta["val"].shape[-1]
    taps = node.args[1].meta["val"].shape[-1]
    stride, dilation = _stride_dilation(node)
    if not all(isinstance(n, int) for n in (length, outputs, taps)) or min(before, after) < 0:
        return None
    last_output = (outputs - 1) * stride
    live = [j for j in range(taps) if last_output + j * dilation - before >= 0 and j * dilation - before < length]
    if not live or len(live) == taps:
        return None
    first, last = live[0], live[-1]
    last_read = last_output + last * dilation - before
    return source, (first, last), (before - first * dilation, max(0, last_read - (length - 1)))


class PaddedTapsRule(Rule):
    name = "padded_taps"
    stage = 2  # after the rewrites: it sees the convolutions they emit too

    def matches(self, node: Node) -> bool:
        return (
            node.op == "call_function"
            and node.target == aten.conv1d.default
            and all(isinstance(a, Node) for a in node.args[:2])
            and _kept_taps(node) is not None
        )

    def check(self, node: Node, editor: ProgramEditor) -> PaddedTapsPlan | Skip:
        source, taps, padding = _kept_taps(node)
        if padding[0] < 0:
            return Skip(f"taps {taps[0]}-{taps[1]} would start inside the input: it would need a slice")
        try:
            weight = editor.constant_value(node.args[1])
        except NotConstant as why:
            return Skip(f"the weight is not a constant: {why}")
        if not bool(torch.isfinite(weight).all()):
            return Skip("the weight has inf or nan, which zeros would not cancel")
        stride, dilation = _stride_dilation(node)
        length = source.meta["val"].shape[-1] + sum(padding)
        if (length - dilation * (taps[1] - taps[0]) - 1) // stride + 1 != node.meta["val"].shape[-1]:
            return Skip("the kept taps would give more outputs: a crop would follow")
        return PaddedTapsPlan(node, source, taps, padding)

    def describe(self, plan: PaddedTapsPlan) -> str:
        first, last = plan.taps
        kernel = plan.node.args[1].meta["val"].shape[-1]
        return f"taps {first}-{last} of {kernel} kept: the others read only zero padding"

    def apply(self, plan: PaddedTapsPlan, editor: ProgramEditor) -> None:
        node = plan.node
        first, last = plan.taps
        weight = editor.constant_value(node.args[1]).detach()[..., first : last + 1].clone()
        weight = editor.new_constant(weight, f"{node.name}_taps")
        x = plan.source
        if any(plan.padding):
            x = editor.emit(node, aten.constant_pad_nd.default, x, list(plan.padding), 0.0)
        bias = node.args[2] if len(node.args) > 2 else None
        stride, dilation = _stride_dilation(node)
        groups = node.args[6] if len(node.args) > 6 else 1
        conv = editor.emit(node, aten.conv1d.default, x, weight, bias, [stride], [0], [dilation], groups)
        editor.replace([node], conv)
