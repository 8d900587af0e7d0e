"""A convolution of a nearest upsample -> one transposed convolution of the input (polyphase next).

    conv(nearest(x, r), w, padding p) = conv_transpose(x, G, stride r, padding k - 1 - p)

with G of k + r - 1 taps per dimension, sums of w's taps (math/polyphase.py nearest_conv_weight).
`conv_transpose` then computes it, in the next stage, as one stride-1 convolution at the input's
resolution with ceil((k + r - 1) / r) taps per phase: for the 3x3 convolution after x2 of Stable
Diffusion's VAE decoder and of U-Net up blocks, 2x2 taps per output instead of 3x3 (4/9 of the
multiply-adds), and the upsampled tensor is never made. A 1x1 convolution commutes with the upsample
instead: nearest(conv(x)), r^D times fewer multiply-adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.math.polyphase import mac_overhead, nearest_conv_weight, phase_window
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.conv_transpose import MAX_MAC_OVERHEAD
from phaseconv.rules.nearest_upsample import UPSAMPLE_NEAREST, NearestUpsampleRule, is_spatial_gather

aten = torch.ops.aten
CONVOLUTIONS = {aten.conv1d.default: 1, aten.conv2d.default: 2, aten.conv3d.default: 3}
TRANSPOSED = {1: aten.conv_transpose1d.default, 2: aten.conv_transpose2d.input, 3: aten.conv_transpose3d.input}


@dataclass(frozen=True)
class Convolution:
    """A forward convolution node's settings, one entry per spatial dimension."""

    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int


def parse_convolution(node: Node) -> Convolution | None:
    """`conv{1,2,3}d` (export's form) or `convolution(transposed=False)` (core ATen's), else None."""
    if node.op != "call_function":
        return None
    if node.target in CONVOLUTIONS:
        spatial = CONVOLUTIONS[node.target]
        stride, padding, dilation, groups = (list(node.args[3:]) + [1, 0, 1, 1][len(node.args[3:]) :])[:4]
    elif node.target == aten.convolution.default and not node.args[6]:
        spatial = len(node.args[3])
        stride, padding, dilation, groups = node.args[3], node.args[4], node.args[5], node.args[8]
    else:
        return None
    if isinstance(padding, str):  # conv2d.padding's "same" / "valid" is another overload; never here
        return None

    def per_dim(value) -> list[int]:
        value = [value] if isinstance(value, int) else list(value)
        return value * spatial if len(value) == 1 else value

    return Convolution(per_dim(stride), per_dim(padding), per_dim(dilation), groups)


def _upsample_of(node: Node) -> Node | None:
    source = node.args[0] if node.args else None
    if not isinstance(source, Node) or source.op != "call_function":
        return None
    return source if source.target in UPSAMPLE_NEAREST or is_spatial_gather(source) else None


@dataclass(frozen=True)
class NearestConvPlan:
    node: Node
    upsample: Node
    factors: list[int]
    conv: Convolution
    weight: torch.Tensor | None  # the transposed convolution's; None: a 1x1 convolution moved before the upsample


class NearestConvRule(Rule):
    """conv(nearest(x, r)) -> conv_transpose(x, G, stride r); a 1x1 conv -> nearest(conv(x))."""

    name = "nearest_conv"
    stage = 0  # before conv_transpose, which makes the transposed convolution it emits polyphase

    def __init__(self, max_mac_overhead: float = MAX_MAC_OVERHEAD):
        """`max_mac_overhead`: the limit of conv_transpose's polyphase form over the deconvolution
        (a stride-1 convolution must follow, not a deconvolution XNNPACK runs slowly); math.inf
        for a runtime that runs the transposed convolution itself."""
        self.max_mac_overhead = max_mac_overhead

    def matches(self, node: Node) -> bool:
        return parse_convolution(node) is not None and _upsample_of(node) is not None

    def check(self, node: Node, editor: ProgramEditor) -> NearestConvPlan | Skip:
        conv, upsample = parse_convolution(node), _upsample_of(node)
        upsampling = NearestUpsampleRule().check(upsample, editor)
        if isinstance(upsampling, Skip):
            return Skip(f"the upsample it reads is not an integer nearest one: {upsampling.reason}")
        factors = upsampling.factors
        if any(s != 1 for s in conv.stride) or any(d != 1 for d in conv.dilation):
            return Skip(f"stride {conv.stride}, dilation {conv.dilation}: only a plain stride-1 convolution is merged")
        x = upsample.args[0].meta["val"]
        if not all(isinstance(n, int) for n in x.shape):
            return Skip(
                f"dynamic size in {list(x.shape)}: the transposed convolution's crop would slice a dynamic "
                "size, which XNNPACK does not run"
            )
        try:
            weight = editor.constant_value(node.args[1])
        except NotConstant as why:
            return Skip(f"the weight is not a constant: {why}")
        if weight.dtype != x.dtype or not weight.dtype.is_floating_point:
            return Skip(f"{weight.dtype} weight on a {x.dtype} input: only a floating-point convolution is merged")
        kernel = list(weight.shape[2:])
        if all(k == 1 for k in kernel) and not any(conv.padding):
            return NearestConvPlan(node, upsample, factors, conv, None)
        if any(not 0 <= p <= k - 1 for p, k in zip(conv.padding, kernel)):
            return Skip(f"padding {conv.padding} past kernel {kernel} - 1: the output reads more than the copies")
        taps = [k + r - 1 for k, r in zip(kernel, factors)]
        windows = [
            phase_window(n, r, k - 1 - p, 1, t, 0)
            for n, r, t, k, p in zip(x.shape[2:], factors, taps, kernel, conv.padding)
        ]
        overhead = mac_overhead(windows, taps)
        if overhead > self.max_mac_overhead:
            return Skip(
                f"its polyphase form would do {overhead:.2f}x the multiply-adds of a transposed convolution "
                f"(kernel {kernel} after x{factors}, input {list(x.shape[2:])}), over the "
                f"{self.max_mac_overhead}x past which conv_transpose leaves one to XNNPACK"
            )
        return NearestConvPlan(
            node, upsample, factors, conv, nearest_conv_weight(weight.detach(), factors, conv.groups)
        )

    def describe(self, plan: NearestConvPlan) -> str:
        scale = "x".join(map(str, plan.factors))
        if plan.weight is None:
            return f"1x1 convolution before the x{scale} upsample: {math.prod(plan.factors)}x fewer multiply-adds"
        taps = "x".join(map(str, plan.weight.shape[2:]))
        return f"x{scale} then conv: one transposed convolution of stride {scale}, {taps} taps"

    def apply(self, plan: NearestConvPlan, editor: ProgramEditor) -> None:
        node, upsample = plan.node, plan.upsample
        x = upsample.args[0]
        editor.release(upsample)  # dropped with its constants (a gather's indices) unless read elsewhere
        if plan.weight is None:
            conv = editor.emit(node, node.target, x, *node.args[1:], **node.kwargs)
            editor.replace([node], editor.emit(node, upsample.target, conv, *upsample.args[1:], **upsample.kwargs))
            return
        bias = node.args[2] if len(node.args) > 2 else None  # read now: folding may have replaced it
        weight = editor.new_constant(plan.weight, f"{node.name}_after_nearest")
        spatial = len(plan.factors)
        kernel = plan.node.args[1].meta["val"].shape[2:]
        padding = [k - 1 - p for k, p in zip(kernel, plan.conv.padding)]
        if node.target in CONVOLUTIONS:
            args = (x, weight, bias, plan.factors, padding, [0] * spatial, plan.conv.groups, [1] * spatial)
            transposed = editor.emit(node, TRANSPOSED[spatial], *args)
        else:
            args = (x, weight, bias, plan.factors, padding, [1] * spatial, True, [0] * spatial, plan.conv.groups)
            transposed = editor.emit(node, aten.convolution.default, *args)
        editor.replace([node], transposed)
