"""Read a graph's constant pads; emit the zero padding of a convolution's input, for the rules that
read its windows themselves."""

from __future__ import annotations

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor

aten = torch.ops.aten
PADS = {aten.pad.default, aten.constant_pad_nd.default}
SHAPE_OPS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.permute.default,
    aten.permute_copy.default,
    aten.transpose.int,
}


def constant_mode(pad: Node) -> bool:
    """Is this pad node a constant pad (aten.pad's mode, constant_pad_nd always)."""
    return pad.target == aten.constant_pad_nd.default or (len(pad.args) < 3 or pad.args[2] == "constant")


def fill_value(pad: Node) -> float:
    """The value a constant pad fills with: aten.pad's 4th argument, constant_pad_nd's 3rd, else 0."""
    index = 3 if pad.target == aten.pad.default else 2
    value = pad.args[index] if len(pad.args) > index else pad.kwargs.get("value")
    return 0.0 if value is None else value


def _origin(node: Node) -> Node:
    """The value a chain of views and permutes ending at `node` starts from."""
    while node.op == "call_function" and node.target in SHAPE_OPS and isinstance(node.args[0], Node):
        node = node.args[0]
    return node


def held_nchw(node: Node) -> bool:
    """Whether XNNPACK holds `node` NCHW in phaseconv's lowering: a program input, or a view chain
    from one or from a value below 4-D. A chain from a 4-D value (a convolution's polyphase
    interleave) is moved on the channels-last buffer (lowering/layout.py) and stays NHWC."""
    origin = _origin(node)
    return origin.op == "placeholder" or origin.meta["val"].dim() != 4


def pad_spatial(editor: ProgramEditor, anchor: Node, x: Node, pads: list[tuple[int, int]]) -> Node:
    """x zero-padded by (before, after) on each spatial axis, emitted before `anchor`.

    An NCHW [N, C, T, 1] (a lifted 1-D value) is padded as [N, C, T] between two views, which move
    nothing in NCHW: XNNPACK's pad of [N, C, T, 1] copies one element per row, many times slower
    than the same pad of [N, C, T].
    """
    if not any(p for axis in pads for p in axis):
        return x
    shape = list(x.meta["val"].shape)
    if len(shape) == 4 and shape[3] == 1 and pads[1] == (0, 0) and held_nchw(x):
        flat = editor.emit(anchor, aten.view.default, x, shape[:3])
        padded = editor.emit(anchor, aten.constant_pad_nd.default, flat, list(pads[0]), 0.0)
        return editor.emit(anchor, aten.view.default, padded, [*padded.meta["val"].shape, 1])
    flat_pads = [p for before, after in reversed(pads) for p in (before, after)]  # last axis first
    return editor.emit(anchor, aten.constant_pad_nd.default, x, flat_pads, 0.0)


def read_samples(editor: ProgramEditor, anchor: Node, x: Node, samples: tuple) -> tuple[Node, list[int]]:
    """x restricted to samples [start, stop) per spatial dimension, zeros outside the input: the
    slices, the padding beyond what both sides share, and that shared padding for the convolution."""
    lengths = x.meta["val"].shape[2:]
    for dim, ((start, stop), length) in enumerate(zip(samples, lengths), start=2):
        if start > 0 or stop < length:
            x = editor.emit(anchor, aten.slice.Tensor, x, dim, max(start, 0), min(stop, length))
    zeros = [(max(0, -start), max(0, stop - length)) for (start, stop), length in zip(samples, lengths)]
    shared = [min(before, after) for before, after in zeros]
    extra = [
        pad for (before, after), both in zip(reversed(zeros), reversed(shared)) for pad in (before - both, after - both)
    ]
    if any(extra):
        x = editor.emit(anchor, aten.constant_pad_nd.default, x, extra, 0.0)
    return x, shared
