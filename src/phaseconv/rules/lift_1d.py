"""Chains of 1-D convolutions -> the same chain on [N, C, T, 1], so XNNPACK keeps it channels-last.

ExecuTorch runs each conv1d as unsqueeze -> conv2d -> squeeze, and every unsqueeze or squeeze is a
view that XNNPACK computes in NCHW: two layout transposes per convolution, each a full pass over
the activation (Mimi's decoder: a large share of its time). Here a connected
region of conv1d and the elementwise ops and last-axis pads between them is rewritten on 4-D
tensors, x[n, c, t] -> x4[n, c, t, 0] (time on the height axis, as ExecuTorch's own conv1d pass
puts it: XNNPACK's convolutions with the kernel along the width run slower):

    conv1d(x, w, b, s, p, d, g)   -> conv2d(x4, w[..., None], b, (s, 1), (p, 0), (d, 1), g)
    f(x), x + y, pad(x, [l, r])   -> f(x4), x4 + y4, pad(x4, [0, 0, l, r])
    x[:, :, a:b], cat(xs, -1)     -> x4[:, :, a:b], cat(x4s, 2)   (a same-shape view or reshape: dropped)

with one view into the region per value that enters it and one view out per value that leaves; a
dynamic length is the views' inferred size (-1). The arithmetic is unchanged: the same products and
sums in the same order (bit-identical).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.padding import PADS, constant_mode, fill_value
from phaseconv.graph.program import NotConstant, ProgramEditor, inferred_shape
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten

UNARY = {
    aten.elu.default,
    aten.relu.default,
    aten.leaky_relu.default,
    aten.gelu.default,
    aten.tanh.default,
    aten.sigmoid.default,
    aten.hardtanh.default,
    aten.clamp.default,
    aten.exp.default,
    aten.sin.default,
    aten.neg.default,
    aten.abs.default,
    aten.pow.Tensor_Scalar,
    aten.mul.Scalar,
    aten.add.Scalar,
    aten.sub.Scalar,
    aten.div.Scalar,
}
BINARY = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor}
CONV1D_DEFAULTS = (None, [1], [0], [1], 1)  # bias, stride, padding, dilation, groups
VIEWS = {aten.view.default, aten._unsafe_view.default}


@dataclass(frozen=True)
class LiftPlan:
    region: tuple[Node, ...]  # in graph order
    convolutions: int


def _is_1d_conv(node: Node) -> bool:
    return node.op == "call_function" and node.target == aten.conv1d.default


def _float_3d(node) -> bool:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return isinstance(value, torch.Tensor) and value.dim() == 3 and value.dtype == torch.float32


def _eligible(node: Node) -> bool:
    """An op the region can hold: a 1-D conv, or an elementwise op or last-axis constant pad of a
    float32 [N, C, T] tensor."""
    if node.op != "call_function" or not _float_3d(node):
        return False
    if _is_1d_conv(node):
        return all(isinstance(n, Node) for n in node.args[:2])
    if node.target in VIEWS or node.target == aten.reshape.default:
        return node.args[0].meta["val"].shape == node.meta["val"].shape  # a no-op, as DAC's snake has
    if node.target == aten.slice.Tensor:
        return node.args[1] in (2, -1)  # the time axis
    if node.target == aten.cat.default:  # along time: a reflect pad's slices and the input
        return len(node.args) > 1 and node.args[1] in (2, -1) and all(_float_3d(t) for t in node.args[0])
    if node.target in PADS:
        return constant_mode(node) and len(node.args[1]) == 2
    return node.target in UNARY or node.target in BINARY


SHAPE_CHAIN = {*VIEWS, aten.reshape.default, aten.permute.default, aten.permute_copy.default, aten.transpose.int}


def _as_conv2d(editor: ProgramEditor, conv: Node, x4: Node) -> Node:
    """conv1d(x, w, b, s, p, d, g) as conv2d(x4, w[..., None], b, (s, 1), (p, 0), (d, 1), g), x4 = x[..., None]."""
    _, w, bias, stride, padding, dilation, groups = (*conv.args, *CONV1D_DEFAULTS[len(conv.args) - 2 :])
    weight = editor.derived_constant(w, "as_2d", lambda t: t.unsqueeze(-1))
    return editor.emit(conv, aten.conv2d.default, x4, weight, bias, [*stride, 1], [*padding, 0], [*dilation, 1], groups)


def lift_convolution(editor: ProgramEditor, conv: Node) -> Node:
    """A conv1d alone -> view(conv2d(view(x, [N, C, T, 1]), ...), [N, C', T']); returns the conv2d.
    For the rules that turn a convolution into many ops on its input: they then read one view."""
    x = conv.args[0]
    column = editor.emit(conv, aten.view.default, x, [*inferred_shape(x.meta["val"].shape), 1])
    lifted = _as_conv2d(editor, conv, column)
    editor.replace([conv], editor.emit(conv, aten.view.default, lifted, inferred_shape(conv.meta["val"].shape)))
    return lifted


def _chain_source(node: Node) -> Node | None:
    """The value a chain of views and permutes ending at the 3-D float `node` starts from (a 1-D
    polyphase interleave: view, permute, view), or None when `node` ends no such chain."""
    if node.op != "call_function" or node.target not in SHAPE_CHAIN or not _float_3d(node):
        return None
    while node.op == "call_function" and node.target in SHAPE_CHAIN:
        node = node.args[0]
    return node


def _downstream(graph, through_views: bool = False) -> set[Node]:
    """Eligible ops that are 1-D convs or read one through eligible ops (with `through_views`,
    also through a chain of views and permutes: an interleave). The ops before a region's first
    conv stay 3-D: a pad there would run on an NCHW [N, C, T, 1] tensor, one element per row
    (many times the cost of the same pad on [N, C, T]), unless the lowering moves the chain
    on the channels-last buffer (phaseconv.lower's shape chains), so the pad stays channels-last."""
    found, chain_ends = set(), set()
    for node in graph.nodes:
        if _eligible(node) and (_is_1d_conv(node) or any(n in found or n in chain_ends for n in node.all_input_nodes)):
            found.add(node)
        elif through_views and _chain_source(node) in found:
            chain_ends.add(node)
    return found


def _region(seed: Node, lifted: set[Node]) -> list[Node]:
    """The ops of `lifted` connected to `seed`, through operands and users."""
    found, stack = {seed}, [seed]
    while stack:
        node = stack.pop()
        for other in [*node.all_input_nodes, *node.users]:
            if other not in found and other in lifted:
                found.add(other)
                stack.append(other)
    return list(found)


class Lift1dRule(Rule):
    """Regions of conv1d and elementwise ops -> conv2d and the same ops on [N, C, T, 1].

    through_views: the ops after a view chain of a lifted value (an interleave) are lifted too;
    for a lowering that moves such chains on the channels-last buffer (phaseconv.lower)."""

    name = "lift_1d"
    stage = 3  # after the rewrites and clean-ups: it sees the polyphase convs and ELU as emitted

    def __init__(self, through_views: bool = False):
        self.through_views = through_views

    def candidates(self, editor: ProgramEditor) -> list[Node]:
        """The first 1-D convolution of each region of two or more: a conv alone gains nothing, its
        views in and out are the unsqueeze and squeeze ExecuTorch puts there itself."""
        order = {node: index for index, node in enumerate(editor.graph.nodes)}
        lifted = _downstream(editor.graph, self.through_views)
        seen, leaders = set(), []
        for node in editor.graph.nodes:
            if _is_1d_conv(node) and node not in seen and node in lifted:
                region = _region(node, lifted)
                seen.update(region)
                convolutions = sorted((n for n in region if _is_1d_conv(n)), key=order.get)
                if len(convolutions) > 1:
                    leaders.append(convolutions[0])
        return leaders

    def check(self, node: Node, editor: ProgramEditor) -> LiftPlan | Skip:
        order = {n: index for index, n in enumerate(editor.graph.nodes)}
        region = sorted(_region(node, _downstream(editor.graph, self.through_views)), key=order.get)
        for member in region:
            if _is_1d_conv(member):
                try:
                    editor.constant_value(member.args[1])
                except NotConstant as why:
                    return Skip(f"a convolution's weight is not a constant: {why}")
            shape = member.meta["val"].shape
            symbolic = [axis for axis, size in enumerate(shape) if not isinstance(size, int)]
            if symbolic not in ([], [2]):
                return Skip(f"dynamic sizes {list(shape)}: XNNPACK's reshape infers one size, the length")
            if symbolic and member.target == aten.slice.Tensor:
                return Skip("a slice of a dynamic length, which XNNPACK does not take either way")
            for operand in member.all_input_nodes:
                if operand.op == "call_function" and "quantized_decomposed" in str(operand.target):
                    return Skip("a quantized convolution: its dequantize -> conv pattern must stay as it is")
        return LiftPlan(tuple(region), sum(_is_1d_conv(n) for n in region))

    def describe(self, plan: LiftPlan) -> str:
        others = len(plan.region) - plan.convolutions
        return f"{plan.convolutions} conv1d and {others} elementwise ops on [N, C, T, 1]: channels-last between them"

    def apply(self, plan: LiftPlan, editor: ProgramEditor) -> None:
        members = set(plan.region)
        lifted: dict[Node, Node] = {}
        anchor = plan.region[0]

        def into(value):
            """The 4-D form of an operand: lifted member, constant, view of an outside value."""
            if not isinstance(value, Node):
                return value
            if value in lifted:
                return lifted[value]
            shape = inferred_shape(value.meta["val"].shape)
            shape4 = [*[1] * (3 - len(shape)), *shape, 1]
            if editor.is_constant_input(value):
                lifted[value] = editor.derived_constant(value, "4d", lambda t: t.reshape(shape4))
            else:
                source = value.args[0] if value.op == "call_function" and value.target in VIEWS else value
                lifted[value] = editor.emit(anchor, aten.view.default, source, shape4)
            return lifted[value]

        for node in plan.region:
            anchor = node
            if _is_1d_conv(node):
                new = _as_conv2d(editor, node, into(node.args[0]))
            elif node.target in VIEWS or node.target == aten.reshape.default:
                new = into(node.args[0])
            elif node.target == aten.slice.Tensor:
                new = editor.emit(node, node.target, into(node.args[0]), 2, *node.args[2:])
            elif node.target == aten.cat.default:
                new = editor.emit(node, node.target, [into(part) for part in node.args[0]], 2)
            elif node.target in PADS:  # as constant_pad_nd: tracing aten.pad in 4-D fixes a dynamic length
                new = editor.emit(
                    node, aten.constant_pad_nd.default, into(node.args[0]), [0, 0, *node.args[1]], fill_value(node)
                )
            else:
                new = editor.emit(node, node.target, *[into(a) for a in node.args], **node.kwargs)
            lifted[node] = new
        order = {node: index for index, node in enumerate(editor.graph.nodes)}
        for node in plan.region:
            outside = sorted((user for user in node.users if user not in members), key=order.get)
            if outside:  # the view goes before the first reader in graph order
                out = editor.emit(outside[0], aten.view.default, lifted[node], inferred_shape(node.meta["val"].shape))
                editor.redirect(node, out, outside)
            editor.release(node)
