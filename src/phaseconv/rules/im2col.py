"""A stride-1 convolution -> its input's shifted windows stacked along channels and a 1x1 convolution.

With the input zero-padded, a convolution is a matrix product over (taps x input channels):

    conv(x, W, b)[o, t] = sum_{u, c} W[o, c, u] * xp[c, t + u*d]
                        = conv1x1(cat_u xp[:, :, u*d : u*d + T],  W'[o, u*C + c] = W[o, c, u])

(per spatial axis in 2-D, taps in row-major order). The products are the same; only the order of
the sum changes (float rounding). XNNPACK runs a 1x1 convolution as a GEMM and a larger kernel as an
IGEMM, and in the pip build of ExecuTorch 1.5.1 on x86-64 without AVX-512 its f32 IGEMM kernel
(FMA3, 5x16) keeps one accumulator on the stack inside its inner loop (`perf`: the hot loop loads,
multiplies into and stores it every step): well under half the rate of the same multiply-adds as a
GEMM on such a CPU (`python benchmarks/operators.py`). The windows cost two copies (the slices and
the cat), which the GEMM wins back from 64 channels up (`python benchmarks/variants.py --only
im2col`). On a CPU whose IGEMM runs at GEMM speed (AVX-512, ARM) the copies are a loss: the rule is
for lowering on and for such a CPU (`phaseconv.lower(ep, target="host")`), not part of the default
rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.padding import pad_spatial
from phaseconv.graph.program import ProgramEditor, weighted_operands
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.lift_1d import lift_convolution

aten = torch.ops.aten
CONVOLUTIONS = {aten.conv1d.default: 1, aten.conv2d.default: 2}


@dataclass(frozen=True)
class Im2colPlan:
    node: Node
    kernel: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    size: tuple[int, ...]  # output positions per spatial axis


def _settings(node: Node, spatial: int) -> tuple[list, list, list, int]:
    """stride, padding, dilation (one per spatial axis) and groups of conv{1,2}d."""
    args = list(node.args) + [None] * (7 - len(node.args))
    per_axis = [list(v) * (spatial if len(v) == 1 else 1) for v in (args[3] or [1], args[4] or [0], args[5] or [1])]
    return *per_axis, args[6] or 1


def window_weight(weight: torch.Tensor) -> torch.Tensor:
    """W[o, c, *taps] -> W'[o, tap*C + c, 1, ...]: the weight of the 1x1 convolution over the windows."""
    out_channels, in_channels, *taps = weight.shape
    order = (0, *range(2, weight.dim()), 1)
    flat = weight.permute(order).reshape(out_channels, math.prod(taps) * in_channels)
    return flat.reshape(out_channels, -1, *[1] * len(taps))


class Im2colRule(Rule):
    """Stride-1 convolutions -> shifted windows, concatenated, and one 1x1 convolution."""

    name = "im2col"
    stage = 4  # after lift_1d (a 1-D conv is then conv2d on [N, C, T, 1]), before split_conv

    def __init__(self, min_in_channels: int = 64, max_taps: int = 11, max_window_bytes: int = 48 * 2**20):
        self.min_in_channels = min_in_channels
        self.max_taps = max_taps
        self.max_window_bytes = max_window_bytes

    def matches(self, node: Node) -> bool:
        if node.op != "call_function" or node.target not in CONVOLUTIONS or not isinstance(node.args[1], Node):
            return False
        return math.prod(node.args[1].meta["val"].shape[2:]) > 1  # a 1x1 convolution is a GEMM already

    def check(self, node: Node, editor: ProgramEditor) -> Im2colPlan | Skip:
        spatial = CONVOLUTIONS[node.target]
        x, weight = node.args[0], node.args[1]
        stride, padding, dilation, groups = _settings(node, spatial)
        if groups != 1:
            return Skip(f"grouped convolution ({groups} groups): XNNPACK runs it as grouped GEMMs already")
        if any(s != 1 for s in stride):
            return Skip(f"stride {stride}: the windows would be strided slices")
        value, w = node.meta["val"], weight.meta["val"]
        if value.dtype != torch.float32:
            return Skip(f"{value.dtype} convolution: measured for float32 (XNNPACK's f32 IGEMM)")
        shapes = (*x.meta["val"].shape, *value.shape)
        if not all(isinstance(size, int) for size in shapes):
            return Skip("a dynamic size: XNNPACK slices static shapes only")
        if value.dim() != spatial + 2:
            return Skip("an unbatched input")
        constants = [weight] + ([node.args[2]] if len(node.args) > 2 and node.args[2] is not None else [])
        if not all(isinstance(n, Node) and editor.is_constant_input(n) for n in constants):
            return Skip("weight or bias computed in the graph (quantized, or derived)")
        in_channels, taps = w.shape[1], math.prod(w.shape[2:])
        if in_channels < self.min_in_channels:
            return Skip(f"{in_channels} input channels: the windows' copies cost more than the GEMM gains here")
        if taps > self.max_taps:
            return Skip(f"{taps} taps: the cat of that many windows is copied in several steps")
        window_bytes = taps * in_channels * math.prod(value.shape[2:]) * value.shape[0] * 4
        if window_bytes > self.max_window_bytes:
            return Skip(f"{window_bytes / 2**20:.0f} MiB of windows: past the cache, the copies lost here")
        return Im2colPlan(node, tuple(w.shape[2:]), tuple(padding), tuple(dilation), tuple(value.shape[2:]))

    def describe(self, plan: Im2colPlan) -> str:
        taps = math.prod(plan.kernel)
        return f"{taps} shifted windows concatenated, one 1x1 convolution (a GEMM)"

    def apply(self, plan: Im2colPlan, editor: ProgramEditor) -> None:
        if plan.node.target == aten.conv1d.default:  # alone, not lifted: its ops then read one view
            plan = self.check(lift_convolution(editor, plan.node), editor)
            assert isinstance(plan, Im2colPlan), plan  # the conditions checked do not change
        node = plan.node
        x, weight, bias = weighted_operands(node)
        padded = pad_spatial(editor, node, x, [(p, p) for p in plan.padding])
        windows = []
        for offsets in _tap_offsets(plan.kernel, plan.dilation):
            window = padded
            for axis, (offset, size) in enumerate(zip(offsets, plan.size)):
                window = editor.emit(node, aten.slice.Tensor, window, 2 + axis, offset, offset + size)
            windows.append(window)
        stacked = editor.emit(node, aten.cat.default, windows, 1)
        flat = editor.derived_constant(weight, "windows", window_weight)
        editor.replace([node], editor.emit(node, node.target, stacked, flat, bias))


def _tap_offsets(kernel: tuple[int, ...], dilation: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Each tap's offset into the padded input, in the row-major order of the kernel."""
    grids = torch.meshgrid(*[torch.arange(k) * d for k, d in zip(kernel, dilation)], indexing="ij")
    return [tuple(int(g.reshape(-1)[i]) for g in grids) for i in range(math.prod(kernel))]
