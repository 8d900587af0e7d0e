"""scaled_dot_product_attention with a constant mask -> softmax(q k^T * scale + M) v as bmm and softmax.

ExecuTorch decomposes attention with a boolean mask into a "safe softmax" (rows with every key
masked give zeros) built from where / any / logical_not / full_like, and its 4-D matmuls into
expand copies: none of them is delegated. With a mask known ahead of time (causal, or folded from
shapes) and no row fully masked, the additive mask M = 0 where attending, -inf elsewhere gives the
same softmax, and everything left is bmm, mul, add and softmax, which XNNPACK runs.

A float mask computed at run time (a streaming decoder's window over a KV cache, whose first slots
are empty at the start of an utterance) is added as it is, when it is a `cat` over the keys with a
constant piece that leaves every query row some key: then no row can be fully masked.

With a dynamic length, a mask built from that length is folded at the longest and sliced to the
run-time length (graph/prefix.py), checked at every length of the range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch.fx import Node

from phaseconv.graph.prefix import PrefixConstant, prefix_constant, read_prefix
from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
SIGNATURE = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


@dataclass(frozen=True)
class AttentionPlan:
    node: Node
    scale: float
    additive_mask: torch.Tensor | None
    runtime_mask: Node | None = None
    prefix: PrefixConstant | None = None  # a dynamic length: additive_mask is [L, K] at the longest


def _arguments(node: Node) -> dict:
    defaults = dict(attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
    return {**defaults, **dict(zip(SIGNATURE, node.args)), **node.kwargs}


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean mask (True = attend) -> 0 / -inf; a float mask is already additive."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


class AttentionRule(Rule):
    """aten.scaled_dot_product_attention -> view, bmm, mul, add, softmax, bmm, view."""

    name = "attention"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.scaled_dot_product_attention.default

    def check(self, node: Node, editor: ProgramEditor) -> AttentionPlan | Skip:
        args = _arguments(node)
        query, key, value = (args[name].meta["val"] for name in ("query", "key", "value"))
        if args["dropout_p"] != 0:
            return Skip("attention with dropout")
        if query.dtype != torch.float32:
            return Skip(f"attention in {query.dtype}: XNNPACK's bmm and softmax are delegated in float32")
        if not all(isinstance(s, int) for t in (query, key, value) for s in (*t.shape[:-2], t.shape[-1])):
            return Skip("a dynamic batch, head count or width")
        if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
            return Skip("query, key and value differ in batch or head count (grouped-query attention)")
        length, keys = query.shape[-2], key.shape[-2]
        if not (isinstance(length, int) and isinstance(keys, int)):
            return self._check_dynamic(node, editor, args)
        mask = None
        if args["attn_mask"] is not None:
            try:
                mask = editor.constant_value(args["attn_mask"])
            except NotConstant as why:
                problem = _runtime_mask_problem(args["attn_mask"], editor, query.dtype)
                if problem is not None:
                    return Skip(f"the mask is not known ahead of time ({why}) and {problem}")
                if args["is_causal"]:
                    return Skip("a mask computed at run time together with is_causal")
                scale = args["scale"] if args["scale"] is not None else 1 / math.sqrt(query.shape[-1])
                return AttentionPlan(node, float(scale), None, args["attn_mask"])
        if args["is_causal"]:
            causal = torch.ones(length, keys, dtype=torch.bool).tril()
            mask = causal if mask is None else mask & causal
        if mask is not None:
            mask = additive_mask(mask, query.dtype)
            if bool((mask == float("-inf")).all(dim=-1).any()):
                return Skip("a query row has every key masked (safe softmax gives zeros, an additive mask NaN)")
        scale = args["scale"] if args["scale"] is not None else 1 / math.sqrt(query.shape[-1])
        return AttentionPlan(node, float(scale), mask)

    def _check_dynamic(self, node: Node, editor: ProgramEditor, args: dict) -> AttentionPlan | Skip:
        """Lengths that follow the program's dynamic size: a mask, if any, must be a prefix constant
        (graph/prefix.py) that leaves every query row a key at every length."""
        dtype = args["query"].meta["val"].dtype
        scale = args["scale"] if args["scale"] is not None else 1 / math.sqrt(args["query"].meta["val"].shape[-1])
        if args["is_causal"]:
            return Skip("is_causal with a dynamic length: not rewritten yet")
        if args["attn_mask"] is None:
            return AttentionPlan(node, float(scale), None)
        try:
            prefix = prefix_constant(editor, args["attn_mask"])
        except NotConstant as why:
            return Skip(f"a dynamic length and a mask that is not a constant's leading block ({why})")
        if any(size != 1 for size in prefix.value.shape[:-2]):
            return Skip("a dynamic length and a mask that differs per batch or head")
        for length in prefix.lengths:
            if bool((additive_mask(prefix.at(length), dtype) == float("-inf")).all(dim=-1).any()):
                return Skip(f"at length {length} a query row has every key masked")
        offset = prefix.value.dim() - 2
        matrix = additive_mask(prefix.value, dtype).reshape(prefix.value.shape[-2:])
        prefix = replace(prefix, value=matrix, sizes=tuple((dim - offset, a, b) for dim, a, b in prefix.sizes))
        return AttentionPlan(node, float(scale), matrix, prefix=prefix)

    def describe(self, plan: AttentionPlan) -> str:
        mask = "" if plan.additive_mask is None else " + constant mask"
        mask = " + run-time mask" if plan.runtime_mask is not None else mask
        return f"softmax(q k^T * {plan.scale:g}{mask}) v as bmm / softmax"

    def apply(self, plan: AttentionPlan, editor: ProgramEditor) -> None:
        node = plan.node
        args = _arguments(node)
        query, key, value = args["query"], args["key"], args["value"]
        *batch, length, width = query.meta["val"].shape
        keys, value_width = key.meta["val"].shape[-2], value.meta["val"].shape[-1]
        heads = math.prod(batch)

        def emit(op, *operands):
            return editor.emit(node, op, *operands)

        length, keys = (size if isinstance(size, int) else -1 for size in (length, keys))  # one per view
        q = emit(aten.view.default, query, [heads, length, width])
        key_transposed = _transposed_source(key)
        if key_transposed is not None:  # keys kept as [..., width, keys]: k^T is already there
            k = emit(aten.view.default, key_transposed, [heads, width, keys])
        else:
            k = emit(aten.permute_copy.default, emit(aten.view.default, key, [heads, keys, width]), [0, 2, 1])
        scores = emit(aten.bmm.default, q, k)
        scores = emit(aten.mul.Tensor, scores, editor.scalar_constant(plan.scale, scores))
        if plan.prefix is not None:  # [L, K] of the longest, sliced to the run-time lengths
            mask = read_prefix(editor, node, plan.prefix, plan.additive_mask, f"{node.name}_mask")
            scores = emit(aten.add.Tensor, scores, mask)
        elif plan.additive_mask is not None or plan.runtime_mask is not None:
            scores = emit(aten.view.default, scores, [*batch, length, keys])
            if plan.runtime_mask is not None:
                shape = list(plan.runtime_mask.meta["val"].shape)
                mask = emit(aten.view.default, plan.runtime_mask, [1] * (len(batch) + 2 - len(shape)) + shape)
            else:
                mask = plan.additive_mask
                mask = mask.reshape([1] * (len(batch) + 2 - mask.dim()) + list(mask.shape)).contiguous()
                mask = editor.new_constant(mask, f"{node.name}_mask")
            scores = emit(aten.add.Tensor, scores, mask)
            scores = emit(aten.view.default, scores, [heads, length, keys])
        weights = emit(aten._softmax.default, scores, -1, False)
        v = emit(aten.view.default, value, [heads, keys, value_width])
        out = emit(aten.bmm.default, weights, v)
        out = emit(aten.view.default, out, [*batch, length, value_width])
        editor.replace([node], _with_layout_of(node, out, emit))


def _transposed_source(node: Node) -> Node | None:
    """X when `node` is X with its last two dimensions swapped (a transpose or permute), else None."""
    rank = node.meta["val"].dim()
    swapped = [*range(rank - 2), rank - 1, rank - 2]
    if node.target == aten.transpose.int:
        dims = sorted(d % rank for d in node.args[1:3])
        return node.args[0] if dims == [rank - 2, rank - 1] else None
    if node.target in (aten.permute.default, aten.permute_copy.default):
        return node.args[0] if [d % rank for d in node.args[1]] == swapped else None
    return None


def _with_layout_of(node: Node, out: Node, emit) -> Node:
    """`out` (contiguous) with the strides of `node`'s result: PyTorch's attention returns
    [B, H, L, D] laid out as [B, L, H, D], and a later `transpose(1, 2).view(...)` relies on it."""
    val = node.meta["val"]
    if val.is_contiguous():
        return out
    order = sorted(range(val.dim()), key=lambda dim: -val.stride(dim))
    inverse = sorted(range(val.dim()), key=order.__getitem__)
    return emit(aten.permute.default, emit(aten.permute_copy.default, out, order), inverse)


def _runtime_mask_problem(mask: Node, editor: ProgramEditor, dtype: torch.dtype) -> str | None:
    """None if a run-time mask can be added as it is: a float `cat` over the keys with a constant
    piece that leaves every query row a key (so no row is ever fully masked); else what is missing."""
    value = mask.meta["val"]
    if value.dtype != dtype:
        return f"it is {value.dtype}, not an additive {dtype} mask"
    if mask.target != aten.cat.default or (mask.args[1] if len(mask.args) > 1 else 0) % value.dim() != value.dim() - 1:
        return "it is not a cat over the keys with a constant part that keeps every query row attending"
    for piece in mask.args[0]:
        try:
            constant = editor.constant_value(piece)
        except NotConstant:
            continue
        rows = torch.broadcast_to(constant, (*value.shape[:-1], constant.shape[-1]))
        if bool((rows > float("-inf")).any(dim=-1).all()):
            return None
    return "no constant part of it keeps every query row attending to some key"
