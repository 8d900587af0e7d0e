"""Rotary embedding of interleaved pairs -> x * C + (x @ P) * S: one linear and three elementwise ops.

Kyutai's RoPE (pocket-tts's flow language model and Mimi's transformer) rotates the pairs
(x[2i], x[2i+1]) of the last dimension:

    r = x.view(..., n, 2);  a, b = r[..., 0], r[..., 1]
    y = stack([a * cos - b * sin, a * sin + b * cos], -1).view(..., 2n)

which XNNPACK runs as two slices of the innermost pairs and their views, four products, a
difference, a sum and a stack (a cat of two views), twice per attention layer; the form below is
faster for pocket-tts's decoder step (`python benchmarks/variants.py --only "(interleaved_rope)"`).
The same values:

    y = x * C + (x @ P) * S,   C[2i] = C[2i + 1] = cos[i],  S likewise,
    (x @ P)[2i] = -x[2i + 1],  (x @ P)[2i + 1] = x[2i]

P a signed permutation (each output of the linear layer one product by +-1 plus exact zeros), C and
S each value twice (a product by ones [2], shared by the queries and keys that read the same cos).
Element by element the floating-point operations are the same: a*cos + (-b)*sin = a*cos - b*sin and
b*cos + a*sin = a*sin + b*cos.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import ProgramEditor, inferred_shape
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.rotate_half import last_dim_slice

aten = torch.ops.aten
CASTS = (aten.to.dtype, aten._to_copy.default, aten.alias.default)


@dataclass(frozen=True)
class InterleavedRopePlan:
    node: Node  # the stack
    replaced: tuple[Node, ...]  # the stack, and its view back to x's shape if that is its only user
    pairs: Node  # x.view(..., n, 2); x is read from it when applied (another rule may replace x first)
    cos: Node
    sin: Node


def pair_swap(width: int, dtype: torch.dtype) -> torch.Tensor:
    """P as a linear layer's weight [out, in]: out[2i] = -x[2i + 1], out[2i + 1] = x[2i]."""
    weight = torch.zeros(width, width, dtype=dtype)
    even = torch.arange(0, width, 2)
    weight[even, even + 1] = -1
    weight[even + 1, even] = 1
    return weight


def _uncast(node) -> Node:
    """`node` without casts to its own dtype (export keeps pocket-tts's `.float()` of fp32 values)."""
    while (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target in CASTS
        and node.meta["val"].dtype == node.args[0].meta["val"].dtype
    ):
        node = node.args[0]
    return node


def _part(node: Node) -> tuple[Node, int] | None:
    """(r, i) when `node` is r[..., i] of a last dimension of 2: a select, or a view of a one-wide slice."""
    node = _uncast(node)
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    if node.target == aten.select.int:
        pairs, dim, index = node.args
        if dim % pairs.meta["val"].dim() != pairs.meta["val"].dim() - 1:
            return None
    elif node.target == aten.view.default and last_dim_slice(sliced := _uncast(node.args[0])) is not None:
        pairs, index, _ = last_dim_slice(sliced)
        kept = sliced.meta["val"].shape
        if kept[-1] != 1 or tuple(node.meta["val"].shape) != tuple(kept[:-1]):
            return None
    else:
        return None
    if pairs.meta["val"].shape[-1] != 2:
        return None
    return pairs, (index or 0) % 2


def _part_product(node) -> tuple[tuple[Node, int], Node] | None:
    """((r, i), factor) when `node` is r[..., i] * factor, in either order."""
    node = _uncast(node)
    if not isinstance(node, Node) or node.target != aten.mul.Tensor or not all(isinstance(a, Node) for a in node.args):
        return None
    for part, factor in (node.args, node.args[::-1]):
        found = _part(part)
        if found is not None and _part(factor) is None:
            return found, factor
    return None


def _terms(node, target) -> list | None:
    node = _uncast(node)
    if not isinstance(node, Node) or node.target != target or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return None
    return [_part_product(term) for term in node.args]


def _rotation(stack: Node) -> tuple[Node, Node, Node] | None:
    """(r, cos, sin) when `stack` is stack([a*cos - b*sin, a*sin + b*cos], -1), a = r[..., 0] and
    b = r[..., 1] (the sum's terms in either order)."""
    difference, total = _terms(stack.args[0][0], aten.sub.Tensor), _terms(stack.args[0][1], aten.add.Tensor)
    if not difference or not total or None in difference or None in total:
        return None
    ((pairs, first), cos), ((other, second), sin) = difference
    if other is not pairs or (first, second) != (0, 1):
        return None
    if {(part, factor) for part, factor in total} != {((pairs, 0), sin), ((pairs, 1), cos)}:
        return None
    return pairs, cos, sin


def _is_stack_of_two(node: Node) -> bool:
    return node.op == "call_function" and node.target == aten.stack.default and len(node.args[0]) == 2


def rotation_nodes(stack: Node) -> set[Node]:
    """The operators of a rotation of interleaved pairs, from the pairs' view to `stack` (none when
    `stack` is not one): what phaseconv.quantize keeps fp32, where the rotation is exact at lowering."""
    found = _rotation(stack) if _is_stack_of_two(stack) else None
    if found is None:
        return set()
    pairs, cos, sin = found
    nodes, pending = set(), [stack]
    while pending:
        node = pending.pop()
        if node in nodes or node in (cos, sin):
            continue
        nodes.add(node)
        if node is not pairs:
            pending += node.all_input_nodes
    return nodes


class InterleavedRopeRule(Rule):
    """stack([a*cos - b*sin, a*sin + b*cos], -1) of x's pairs a, b -> x * C + linear(x, P) * S."""

    name = "interleaved_rope"
    stage = 2  # after views, which rewrites the pairs' view and the view back when their sizes are read from the graph

    def matches(self, node: Node) -> bool:
        return _is_stack_of_two(node)

    def check(self, node: Node, editor: ProgramEditor) -> InterleavedRopePlan | Skip:
        value = node.meta["val"]
        dim = node.args[1] if len(node.args) > 1 else 0
        found = _rotation(node) if dim % value.dim() == value.dim() - 1 else None
        if found is None:
            return Skip("not a rotation of interleaved pairs: stack([a*cos - b*sin, a*sin + b*cos], -1)")
        pairs, cos, sin = found
        x = pairs.args[0] if pairs.op == "call_function" and pairs.target == aten.view.default else None
        source = x.meta["val"] if x is not None else None
        if source is None or tuple(source.shape) != (*pairs.meta["val"].shape[:-2], 2 * pairs.meta["val"].shape[-2]):
            return Skip("the pairs are not a view of a tensor's last dimension")
        shapes = (value.shape, cos.meta["val"].shape, sin.meta["val"].shape)
        if any(sum(not isinstance(size, int) for size in shape) > 1 for shape in shapes):
            return Skip("two dynamic sizes in one shape: the views of the doubled cos and sin infer only one")
        if not all(isinstance(size, int) for size in (*value.shape[-2:], *(shape[-1] for shape in shapes[1:]))):
            return Skip("a dynamic size among the pairs: the doubled cos and sin would need it read at run time")
        if not value.dtype.is_floating_point or value.dtype != source.dtype:
            return Skip(f"{value.dtype}: the linear form is for floating point")
        half = value.shape[-2]
        for angle in (cos, sin):
            shape = angle.meta["val"].shape
            if len(shape) > value.dim() - 1 or shape[-1] not in (1, half) or angle.meta["val"].dtype != value.dtype:
                return Skip(f"cos or sin of shape {list(shape)}: not one value per pair, broadcast over the rest")
        if tuple(value.shape) != tuple(pairs.meta["val"].shape):
            return Skip(f"cos or sin broadcast the pairs {list(pairs.meta['val'].shape)} to {list(value.shape)}")
        replaced = (node,)  # and its view back to x's shape, when that is its one user
        (user,) = node.users if len(node.users) == 1 else (None,)
        if getattr(user, "target", None) in (aten.view.default, aten.reshape.default) and tuple(
            user.meta["val"].shape
        ) == tuple(source.shape):
            replaced = (node, user)
        return InterleavedRopePlan(node, replaced, pairs, cos, sin)

    def describe(self, plan: InterleavedRopePlan) -> str:
        width = 2 * plan.pairs.meta["val"].shape[-2]
        return f"x * cos + (x @ P) * sin, P a signed permutation of {width} (pairs swapped)"

    def apply(self, plan: InterleavedRopePlan, editor: ProgramEditor) -> None:
        x = plan.pairs.args[0]
        width = x.meta["val"].shape[-1]
        anchor = plan.node
        swap = editor.new_constant(pair_swap(width, x.meta["val"].dtype), f"{anchor.name}_pair_swap")
        swapped = editor.emit(anchor, aten.linear.default, x, swap)
        cos, sin = (_doubled(angle, editor) for angle in (plan.cos, plan.sin))
        rotated = editor.emit(
            anchor,
            aten.add.Tensor,
            editor.emit(anchor, aten.mul.Tensor, x, cos),
            editor.emit(anchor, aten.mul.Tensor, swapped, sin),
        )
        if len(plan.replaced) == 1:
            rotated = editor.emit(anchor, aten.view.default, rotated, inferred_shape(anchor.meta["val"].shape))
        editor.replace(list(plan.replaced), rotated)


def _doubled(angle: Node, editor: ProgramEditor) -> Node:
    """`angle` [..., n] with each value twice, [..., 2n] (a product by ones [2]); [..., 1] as it is.
    Made once, right after `angle`, for every rotation that reads it."""
    shape = list(angle.meta["val"].shape)
    if shape[-1] == 1:
        return angle
    made = editor.memo("interleaved_rope: doubled angles")  # every rotation that reads the angle uses it
    if angle in made:
        return made[angle]
    anchor = angle.next
    column = editor.emit(anchor, aten.view.default, angle, inferred_shape([*shape, 1]))
    ones = editor.new_constant(torch.ones([1] * len(shape) + [2], dtype=angle.meta["val"].dtype), f"{angle.name}_twice")
    doubled = editor.emit(
        anchor,
        aten.view.default,
        editor.emit(anchor, aten.mul.Tensor, column, ones),
        inferred_shape([*shape[:-1], 2 * shape[-1]]),
    )
    made[angle] = doubled
    return doubled
