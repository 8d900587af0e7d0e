"""scaled_dot_product_attention with a constant mask -> softmax(q k^T * scale + M) v as bmm and softmax.

ExecuTorch decomposes attention with a boolean mask into a "safe softmax" (rows with every key
masked give zeros) built from where / any / logical_not / full_like, and its 4-D matmuls into
expand copies: none of them is delegated. With a mask known ahead of time (causal, or folded from
shapes) and no row fully masked, the additive mask M = 0 where attending, -inf elsewhere gives the
same softmax, and everything left is bmm, mul, add and softmax, which XNNPACK runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.rules.base import Skip

aten = torch.ops.aten
SIGNATURE = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


@dataclass(frozen=True)
class AttentionPlan:
    node: Node
    scale: float
    additive_mask: torch.Tensor | None


def _arguments(node: Node) -> dict:
    defaults = dict(attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
    return {**defaults, **dict(zip(SIGNATURE, node.args)), **node.kwargs}


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean mask (True = attend) -> 0 / -inf; a float mask is already additive."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


class AttentionRule:
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
        if not all(isinstance(s, int) for t in (query, key, value) for s in t.shape):
            return Skip("dynamic shapes")
        if query.shape[:-2] != key.shape[:-2] or key.shape[:-2] != value.shape[:-2]:
            return Skip("query, key and value differ in batch or head count (grouped-query attention)")
        length, keys = query.shape[-2], key.shape[-2]
        mask = None
        if args["attn_mask"] is not None:
            try:
                mask = editor.constant_value(args["attn_mask"])
            except NotConstant as why:
                return Skip(f"the mask is not known ahead of time: {why}")
        if args["is_causal"]:
            causal = torch.ones(length, keys, dtype=torch.bool).tril()
            mask = causal if mask is None else mask & causal
        if mask is not None:
            mask = additive_mask(mask, query.dtype)
            if bool((mask == float("-inf")).all(dim=-1).any()):
                return Skip("a query row has every key masked (safe softmax gives zeros, an additive mask NaN)")
        scale = args["scale"] if args["scale"] is not None else 1 / math.sqrt(query.shape[-1])
        return AttentionPlan(node, float(scale), mask)

    def describe(self, plan: AttentionPlan) -> str:
        mask = "" if plan.additive_mask is None else " + constant mask"
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

        q = emit(aten.view.default, query, [heads, length, width])
        k = emit(aten.permute_copy.default, emit(aten.view.default, key, [heads, keys, width]), [0, 2, 1])
        scores = emit(aten.bmm.default, q, k)
        scores = emit(aten.mul.Tensor, scores, editor.scalar_constant(plan.scale, scores))
        if plan.additive_mask is not None:
            scores = emit(aten.view.default, scores, [*batch, length, keys])
            mask = plan.additive_mask
            mask = mask.reshape([1] * (len(batch) + 2 - mask.dim()) + list(mask.shape)).contiguous()
            scores = emit(aten.add.Tensor, scores, editor.new_constant(mask, f"{node.name}_mask"))
            scores = emit(aten.view.default, scores, [heads, length, keys])
        weights = emit(aten._softmax.default, scores, -1, False)
        v = emit(aten.view.default, value, [heads, keys, value_width])
        out = emit(aten.bmm.default, weights, v)
        editor.replace([node], emit(aten.view.default, out, [*batch, length, value_width]))
