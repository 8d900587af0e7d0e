"""A 1-D convolution of 2 to 3 taps -> Winograd's F(2, r): r + 1 half-length GEMMs instead of r.

Tiles of two outputs read r + 1 input samples; with B^T, G and A^T of `math/winograd.py`:

    d_e = sum_j B^T[e, j] xp[2i + j]       per point e: a depthwise convolution of stride 2
    m_e = U_e d_e,  U_e = sum_k G[e, k] W[:, :, k]                a 1x1 convolution (a GEMM)
    y[2i + q] = sum_e A^T[q, e] m_e[i]                            sums, then the two interleaved

F(2, 3) does 4/6 of the direct form's multiply-adds, F(2, 2) (every polyphase convolution of a
k = 2s transposed convolution) 3/4; the transforms are exact (entries 0 and +-1), only the
weights' G carries halves. The bias goes on the point whose products reach both outputs once.
On x86-64 without AVX-512 (the target that has `im2col`), the GEMMs are what XNNPACK runs fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.interleave import interleave
from phaseconv.graph.program import ProgramEditor
from phaseconv.math.winograd import transforms
from phaseconv.rules.base import Skip
from phaseconv.rules.im2col import CONVOLUTIONS, _settings

aten = torch.ops.aten


@dataclass(frozen=True)
class WinogradPlan:
    node: Node
    taps: int
    padding: int  # on the time axis, both sides
    outputs: int
    tiles: int


def _time_kernel(node: Node) -> int | None:
    """r for a conv1d of kernel r or a conv2d of kernel (r, 1) (a lifted 1-D one), else None."""
    kernel = node.args[1].meta["val"].shape[2:]
    if len(kernel) == 1 or (len(kernel) == 2 and kernel[1] == 1 and node.meta["val"].shape[3] == 1):
        return kernel[0]
    return None


class WinogradRule:
    """1-D convolutions of 2-3 taps -> F(2, r): strided depthwise transforms, r + 1 GEMMs, sums."""

    name = "winograd"
    stage = 4  # after lift_1d, before im2col (which would take the convolution as it is)

    def __init__(self, taps: tuple[int, ...] = (2, 3), min_channels: int = 32):
        self.taps = taps
        self.min_channels = min_channels  # both in and out: the GEMMs must outweigh the transforms

    def matches(self, node: Node) -> bool:
        if node.op != "call_function" or node.target not in CONVOLUTIONS or not isinstance(node.args[1], Node):
            return False
        return _time_kernel(node) in self.taps

    def check(self, node: Node, editor: ProgramEditor) -> WinogradPlan | Skip:
        spatial = CONVOLUTIONS[node.target]
        stride, padding, dilation, groups = _settings(node, spatial)
        if groups != 1:
            return Skip(f"grouped convolution ({groups} groups)")
        if any(s != 1 for s in stride) or any(d != 1 for d in dilation):
            return Skip(f"stride {stride}, dilation {dilation}: tiles of two outputs need both 1")
        if spatial == 2 and padding[1] != 0:
            return Skip("padding on the width axis of a lifted 1-D convolution")
        value, w = node.meta["val"], node.args[1].meta["val"]
        if value.dtype != torch.float32:
            return Skip(f"{value.dtype} convolution: measured for float32")
        if not all(isinstance(size, int) for size in (*node.args[0].meta["val"].shape, *value.shape)):
            return Skip("a dynamic size: the tiles' interleave and crop need static lengths")
        constants = [node.args[1]] + ([node.args[2]] if len(node.args) > 2 and node.args[2] is not None else [])
        if not all(isinstance(n, Node) and editor.is_constant_input(n) for n in constants):
            return Skip("weight or bias computed in the graph (quantized, or derived)")
        channels = min(w.shape[0], w.shape[1])
        if channels < self.min_channels:
            return Skip(f"{w.shape[1]} -> {w.shape[0]} channels: the transforms cost more than the GEMMs save here")
        outputs = value.shape[2]
        if outputs < 2:
            return Skip("a single output: no tile of two")
        return WinogradPlan(node, _time_kernel(node), padding[0], outputs, (outputs + 1) // 2)

    def describe(self, plan: WinogradPlan) -> str:
        return (
            f"F(2, {plan.taps}): {plan.taps + 1} GEMMs of {plan.tiles} tiles instead of {plan.taps} of {plan.outputs}"
        )

    def apply(self, plan: WinogradPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x, weight = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        lifted = node.target == aten.conv2d.default
        channels = x.meta["val"].shape[1]
        b_t, _, a_t = transforms(plan.taps)
        length = x.meta["val"].shape[2]
        after = 2 * plan.tiles + plan.taps - 1 - (length + plan.padding)  # the last tile's samples
        pads = [plan.padding, after]
        padded = editor.emit(node, aten.constant_pad_nd.default, x, [0, 0, *pads] if lifted else pads, 0.0)
        trailing = [1] if lifted else []
        carrier = next(e for e in range(plan.taps + 1) if a_t[:, e].tolist() == [1.0] * a_t.shape[0])
        products = []
        for e in range(plan.taps + 1):
            kernel = b_t[e].float().reshape(1, 1, -1, *trailing).repeat(channels, 1, 1, *trailing)
            transform = editor.new_constant(kernel, f"{node.name}_winograd_in{e}")
            point = editor.emit(
                node, node.target, padded, transform, None, [2, *trailing], [0, *[0] * len(trailing)],
                [1, *trailing], channels,
            )  # fmt: skip
            point_weight = editor.derived_constant(weight, f"winograd{plan.taps}_{e}", _point_weight(plan.taps, e))
            products.append(editor.emit(node, node.target, point, point_weight, bias if e == carrier else None))
        pair = [_signed_sum(editor, node, products, a_t[q].tolist()) for q in range(a_t.shape[0])]
        stacked = editor.emit(node, aten.cat.default, pair, 1)
        out = interleave(editor, node, stacked, [2, *trailing], 1)
        if 2 * plan.tiles != plan.outputs:
            out = editor.emit(node, aten.slice.Tensor, out, 2, 0, plan.outputs)
        editor.replace([node], out)


def _point_weight(taps: int, e: int):
    """W[o, c, k(, 1)] -> U_e[o, c, 1(, 1)] = sum_k G[e, k] W[o, c, k], computed in float64."""

    def compute(weight: torch.Tensor) -> torch.Tensor:
        _, g, _ = transforms(taps)
        combined = torch.einsum("k,ock...->oc...", g[e], weight.double())
        return combined.unsqueeze(2).to(weight.dtype)

    return compute


def _signed_sum(editor: ProgramEditor, anchor: Node, terms: list[Node], signs: list[float]) -> Node:
    """sum_e signs[e] * terms[e] for signs in {-1, 0, 1}, as adds and subs (the first term positive)."""
    order = sorted((e for e, s in enumerate(signs) if s != 0), key=lambda e: signs[e] < 0)
    assert all(abs(signs[e]) == 1 for e in order) and signs[order[0]] > 0, signs
    total = terms[order[0]]
    for e in order[1:]:
        total = editor.emit(anchor, aten.add.Tensor if signs[e] > 0 else aten.sub.Tensor, total, terms[e])
    return total
