"""A 1-D convolution with weights past the cache -> convolutions of 32 or 64 output channels, concatenated.

XNNPACK's convolution walks its output a tile of rows at a time, and for each tile reads every
output channel's weights. Once the weights pass the core's L2 cache (a few MB), every tile
streams them again from further away (DAC's wide k7 convolutions run well below the rate of its
narrower ones). Split by output channel, each part's weights stay
in the cache while the part walks the whole output:

    conv(x, W, b) = cat_k conv(x, W[kP:(k+1)P], b[kP:(k+1)P])        along the channel axis

P is 64, or 32 where 64 channels' weights pass 1 MiB. Every output is the same products summed
in the same order (bit-identical). The limits are where it paid on the models' convolutions one at
a time (`python benchmarks/variants.py --only split_conv`): 1-D kernels of 3 taps or more, weights of
1.5 MiB or more, 100 output steps or more (a dynamic length counts at its shortest). 2-tap phase
convolutions lose (the cat's copy of a wide output costs more than the re-reads); 2-D is left out
unless `spatial_dims` asks for it.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor, size_range
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
CONVOLUTIONS = (aten.conv1d.default, aten.conv2d.default)


@dataclass(frozen=True)
class SplitPlan:
    node: Node
    bounds: tuple[tuple[int, int], ...]  # output channels [start, stop) of each part


class SplitConvRule(Rule):
    """1-D convolutions whose weights outgrow the cache -> parts whose weights fit it."""

    name = "split_conv"
    stage = 4  # after lift_1d: it sees the 1-D chains as the conv2d they run as

    def __init__(
        self,
        min_weight_bytes: int = 3 * 2**19,
        min_taps: int = 3,
        min_positions: int = 100,
        part_bytes: int = 2**20,
        part_channels: tuple[int, ...] = (64, 32),
        spatial_dims: tuple[int, ...] = (1,),
    ):
        self.min_weight_bytes = min_weight_bytes
        self.min_taps = min_taps
        self.min_positions = min_positions
        self.part_bytes = part_bytes
        self.part_channels = part_channels  # the widest whose weights stay under part_bytes, else the last
        self.spatial_dims = spatial_dims  # 1: conv1d, or conv2d on [N, C, T, 1]

    def matches(self, node: Node) -> bool:
        """A convolution with weights of min_weight_bytes or more: smaller ones are no candidates."""
        if node.op != "call_function" or node.target not in CONVOLUTIONS or not isinstance(node.args[1], Node):
            return False
        w = node.args[1].meta["val"]
        return w.numel() * w.element_size() >= self.min_weight_bytes

    def check(self, node: Node, editor: ProgramEditor) -> SplitPlan | Skip:
        x, weight, bias, *_ = list(node.args) + [None] * (3 - len(node.args))
        groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        if groups != 1:
            return Skip(f"grouped convolution ({groups} groups)")
        constants = [weight] + ([bias] if bias is not None else [])
        if not all(isinstance(n, Node) and n.op == "placeholder" and editor.is_constant_input(n) for n in constants):
            return Skip("weight or bias computed in the graph (quantized, or derived): kept as one convolution")
        out, w = node.meta["val"], weight.meta["val"]
        if out.dtype != torch.float32 or x.meta["val"].dtype != torch.float32:
            return Skip(f"{out.dtype} convolution: the cache sizes were measured for float32")
        if not all(isinstance(s, int) for s in (*out.shape[:2], *out.shape[3:], *x.meta["val"].shape[:2])):
            return Skip("a dynamic size other than the length")
        spatial = 1 if out.dim() == 3 or (out.shape[3] == 1 and w.shape[3] == 1) else out.dim() - 2
        if spatial not in self.spatial_dims:
            return Skip(f"{spatial}-D convolution: splitting gained 1.02x at most here (spatial_dims)")
        length = out.shape[2]
        if not isinstance(length, int):
            known = size_range(length)
            if known is None:
                return Skip("a dynamic length with no lower bound: too few steps to pay may come")
            length = known[0]  # it must pay at the shortest
        positions = length * math.prod(out.shape[3:])
        taps = math.prod(w.shape[2:])
        if taps < self.min_taps:
            return Skip(f"{taps}-tap kernel: a short reduction per weight read, splitting lost here")
        if positions < self.min_positions:
            return Skip(f"{positions} output positions: too few weight re-reads to pay for the cat")
        channel_bytes = math.prod(w.shape[1:]) * w.element_size()
        fitting = [p for p in self.part_channels if p * channel_bytes <= self.part_bytes]
        part = fitting[0] if fitting else self.part_channels[-1]
        channels = w.shape[0]
        if channels < 2 * part:
            return Skip(f"{channels} output channels: fewer than two parts of {part}")
        return SplitPlan(node, tuple((a, min(a + part, channels)) for a in range(0, channels, part)))

    def describe(self, plan: SplitPlan) -> str:
        return f"{len(plan.bounds)} convolutions of {plan.bounds[0][1]} output channels, concatenated"

    def apply(self, plan: SplitPlan, editor: ProgramEditor) -> None:
        node = plan.node
        x, weight, bias, *settings = list(node.args) + [None] * (3 - len(node.args))
        parts = []
        for a, b in plan.bounds:
            rows = operator.itemgetter(slice(a, b))
            part_weight, part_bias = (
                None if c is None else editor.derived_constant(c, f"out{a}_{b}", rows) for c in (weight, bias)
            )
            parts.append(editor.emit(node, node.target, x, part_weight, part_bias, *settings, **node.kwargs))
        editor.replace([node], editor.emit(node, aten.cat.default, parts, 1))
