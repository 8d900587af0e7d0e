"""Emit the interleave of phases (depth-to-space) into a graph, and its inverse."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor
from phaseconv.math.polyphase import interleave_steps, space_to_depth_steps

aten = torch.ops.aten


def interleave(
    editor: ProgramEditor,
    anchor: Node,
    phases: Node,
    stride: list[int],
    groups: int,
    requantize: Callable[[Node], Node] = lambda node: node,
) -> Node:
    """Emit view/permute steps turning [N, g*prod(s)*C/g, Q...] into [N, C, Q_1*s_1, ...].

    At most one of N, Q_i is dynamic: it is the view's inferred size (-1), the only kind XNNPACK takes.

    The permutes are `permute_copy` so that every view reads a contiguous tensor: no clone, which
    XNNPACK would run as an extra copy (and delegates in fp32 only). In a quantized graph
    `requantize` wraps every intermediate result in quantize/dequantize, so the steps run in int8.
    """
    batch, total, *blocks = phases.meta["val"].shape
    channels = total // (groups * math.prod(stride))
    lead = batch * groups if isinstance(batch, int) else -1
    blocks = [q if isinstance(q, int) else -1 for q in blocks]  # the one dynamic size, inferred
    result = phases
    for step in interleave_steps(lead, stride, channels, blocks):
        result = requantize(editor.emit(anchor, aten.view.default, result, list(step.view_shape)))
        result = requantize(editor.emit(anchor, aten.permute_copy.default, result, list(step.permutation)))
    batch = batch if isinstance(batch, int) else -1
    lengths = [q * s if q != -1 else -1 for q, s in zip(blocks, stride)]
    return editor.emit(anchor, aten.view.default, result, [batch, groups * channels, *lengths])


def space_to_depth(editor: ProgramEditor, anchor: Node, x: Node, stride: list[int]) -> Node:
    """Emit view/permute/view turning [N, C, s*Q...] into [N, prod(s)*C, Q...], phase-major (the
    inverse of an interleave; `math.polyphase.space_to_depth_steps`)."""
    split, order, shape = space_to_depth_steps(list(x.meta["val"].shape), stride)
    phases = editor.emit(anchor, aten.view.default, x, split)
    phases = editor.emit(anchor, aten.permute_copy.default, phases, order)
    return editor.emit(anchor, aten.view.default, phases, shape)
