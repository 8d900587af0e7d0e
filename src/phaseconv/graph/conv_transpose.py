"""A transposed convolution node read as its arguments, and the slices that trim its output.

Both export forms: `aten.conv_transpose{1,2,3}d` and `aten.convolution(..., transposed=True)`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.math.polyphase import output_length

aten = torch.ops.aten
CONV_TRANSPOSE_OPS = {
    aten.conv_transpose1d.default: 1,
    aten.conv_transpose2d.input: 2,
    aten.conv_transpose3d.input: 3,
}


@dataclass(frozen=True)
class ConvTranspose:
    """The arguments of a transposed convolution node, one entry per spatial dimension."""

    input: Node
    weight: Node
    bias: Node | None
    stride: list[int]
    padding: list[int]
    output_padding: list[int]
    groups: int
    dilation: list[int]

    @property
    def spatial(self) -> int:
        return len(self.stride)


def parse_conv_transpose(node: Node) -> ConvTranspose | None:
    """Read a node as a transposed convolution, or None if it is not one."""
    if node.op != "call_function":
        return None
    if node.target in CONV_TRANSPOSE_OPS:
        spatial = CONV_TRANSPOSE_OPS[node.target]
        names = ["input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"]
        defaults = [None, None, None, [1], [0], [0], 1, [1]]
    elif node.target == aten.convolution.default and arg(node, 6, "transposed", False):
        spatial = node.args[1].meta["val"].dim() - 2
        names = ["input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups"]
        defaults = [None] * 9
    else:
        return None
    values = {name: arg(node, i, name, default) for i, (name, default) in enumerate(zip(names, defaults))}

    def per_dim(value: int | list[int]) -> list[int]:
        value = [value] if isinstance(value, int) else list(value)
        return value * spatial if len(value) == 1 else value

    return ConvTranspose(
        input=values["input"],
        weight=values["weight"],
        bias=values["bias"],
        stride=per_dim(values["stride"]),
        padding=per_dim(values["padding"]),
        output_padding=per_dim(values["output_padding"]),
        groups=values["groups"],
        dilation=per_dim(values["dilation"]),
    )


def arg(node: Node, index: int, name: str, default):
    """A call's argument by position or keyword."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)


def end_trims(node: Node) -> tuple[list[Node], tuple[int, int]]:
    """Slices of a 1-D output of dynamic length that are its only user, in chain order, with a
    static start and an end counted back from the end (`y[..., a:-b]`, or an end computed as the
    length minus b): those slices, (a, b)."""
    folded, start, end = [], 0, 0
    current = node
    while len(current.users) == 1:
        (user,) = current.users
        if user.op != "call_function" or user.target != aten.slice.Tensor or arg(user, 1, "dim", 0) % 3 != 2:
            break
        first, last, step = arg(user, 2, "start", None), arg(user, 3, "end", None), arg(user, 4, "step", 1)
        first = 0 if first is None else first
        last = sys.maxsize if last is None else last
        if isinstance(last, Node):  # an end computed at run time: a trim when it is the length minus b
            removed = current.meta["val"].shape[2] - user.meta["val"].shape[2] - first
            last = -int(removed) if isinstance(removed, int) or removed.node.expr.is_number else sys.maxsize
            if last == sys.maxsize or last > 0:
                break
        if step != 1 or not (isinstance(first, int) and isinstance(last, int)) or first < 0:
            break
        if 0 <= last < sys.maxsize:  # an end counted from the start: needs the length
            break
        start += first
        end += 0 if last == sys.maxsize else -last
        folded.append(user)
        current = user
    return folded, (start, end)


def trimming_slices(node: Node, conv: ConvTranspose, lengths: list[int], kernel: list[int]):
    """Slices (step 1, on a spatial dimension) that are the only user of the deconvolution, in
    chain order, and the output window [start, stop) per dimension that they leave."""
    full = [
        output_length(n, s, p, d, k, op)
        for n, s, p, d, k, op in zip(lengths, conv.stride, conv.padding, conv.dilation, kernel, conv.output_padding)
    ]
    bounds = [(0, n) for n in full]
    folded: list[Node] = []
    current = node
    rank = conv.spatial + 2
    while len(current.users) == 1:
        (user,) = current.users
        if user.op != "call_function" or user.target != aten.slice.Tensor:
            break
        dim = arg(user, 1, "dim", 0) % rank
        start, end, step = arg(user, 2, "start", None), arg(user, 3, "end", None), arg(user, 4, "step", 1)
        if dim < 2 or step != 1 or not all(isinstance(v, (int, type(None))) for v in (start, end)):
            break
        lo, hi = bounds[dim - 2]
        new_lo, new_hi, _ = slice(start, end).indices(hi - lo)
        if new_hi <= new_lo:
            break
        bounds[dim - 2] = (lo + new_lo, lo + new_hi)
        folded.append(user)
        current = user
    return folded, bounds


# Activations XNNPACK fuses into the convolution that produces their input (FuseActivationPass).
FUSABLE_ACTIVATIONS = (aten.relu.default, aten.hardtanh.default, aten.clamp.default)


def fusable_activation(output: Node) -> Node | None:
    """The only user of the deconvolution's output, if it is an activation XNNPACK fuses into a conv."""
    if len(output.users) != 1:
        return None
    (user,) = output.users
    if user.op == "call_function" and user.target in FUSABLE_ACTIVATIONS and user.args[0] is output:
        return user
    return None
