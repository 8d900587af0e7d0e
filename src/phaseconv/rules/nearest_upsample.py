"""Nearest upsampling by integer factors r_i -> replicate + interleave.

Matched as `aten.upsample_nearest{1,2,3}d` or, after core-ATen decomposition (1-D and 3-D), as a
gather `aten.index(x, [None, None, i...])` whose constant indices pick dst // r.

Every phase of a nearest upsample is the input itself: y[..., r*h + j, ...] = x[..., h, ...], so the
output is the interleave of prod(r) copies. XNNPACK has no nearest resize (it runs portable and splits
the delegate), and delegates `cat` only over distinct nodes, so the copies are `x * 1.0` (exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy
import torch
from torch.fx import Node

from phaseconv.graph.interleave import interleave
from phaseconv.graph.prefix import MAX_LENGTHS
from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.graph.quantized import (
    DEQUANTIZE,
    DYNAMIC_INT8_REASON,
    dequantized_params,
    is_dynamically_quantized,
    quantized_output_params,
    requantizer,
)
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
UPSAMPLE_NEAREST = {
    aten.upsample_nearest1d.vec: 1,
    aten.upsample_nearest2d.vec: 2,
    aten.upsample_nearest3d.vec: 3,
    aten.upsample_nearest1d.default: 1,
    aten.upsample_nearest2d.default: 2,
    aten.upsample_nearest3d.default: 3,
}


@dataclass(frozen=True)
class ReplicatePlan:
    node: Node
    factors: list[int]
    quantization: tuple | None = None  # (quantized input, qparams) when the upsample runs between dq and q


def shared_quantization(node: Node) -> tuple | None:
    """dq(q_x, params) -> upsample -> q(params): the upsample of a statically quantized graph."""
    x = node.args[0]
    params = dequantized_params(x)
    if params is None or quantized_output_params(node) != params:
        return None
    return x.args[0], params


def is_spatial_gather(node: Node) -> bool:
    """aten.index(x, [None, None, i_1, ..., i_D]): core ATen's form of nearest 1-D and 3-D upsampling."""
    if node.op != "call_function" or node.target != aten.index.Tensor:
        return False
    indices = node.args[1]
    return len(indices) > 2 and indices[0] is None and indices[1] is None and all(indices[2:])


def picks_integer_nearest(pick, lengths: list[int], factors: list[int]) -> bool:
    """Apply the node's own indexing to an index map: is source index dst // r picked in every dim?

    An explicit scale_factor such as 2.004 doubles the size but PyTorch's index arithmetic uses
    1/2.004, which picks other pixels; only the op itself can say.
    """
    probe = torch.arange(math.prod(lengths), dtype=torch.float64).reshape(1, 1, *lengths)
    picked = pick(probe)
    expected = probe
    for dim, r in enumerate(factors, start=2):
        expected = expected.repeat_interleave(r, dim)
    return picked.shape == expected.shape and torch.equal(picked, expected)


def _ratio(output, length) -> int | None:
    """output / length when it is a whole number for every value of a dynamic size, else None."""
    if isinstance(output, int) and isinstance(length, int):
        return output // length if output % length == 0 else None
    ratio = sympy.simplify(
        sympy.sympify(output.node.expr if not isinstance(output, int) else output)
        / sympy.sympify(length.node.expr if not isinstance(length, int) else length)
    )
    return int(ratio) if ratio.is_Integer and ratio > 0 else None


def _probe_lengths(editor: ProgramEditor, x) -> list[list[int]]:
    """The spatial sizes to check the op's picking at: the static ones, or every length of the range
    of the one dynamic size (at most one: the interleave infers one size)."""
    sizes = list(x.shape)
    dynamic = [i for i, n in enumerate(sizes) if not isinstance(n, int)]
    if not dynamic:
        return [sizes[2:]]
    if len(dynamic) > 1:
        raise NotConstant("more than one dynamic size, and XNNPACK's reshape (the interleave) infers only one")
    symbol = editor.dynamic_symbol()
    lowest, highest = editor.declared_bounds(symbol)
    if highest - lowest >= MAX_LENGTHS:
        raise NotConstant(f"the range {lowest}..{highest} is too wide to check at every length")
    return [
        [n if isinstance(n, int) else int(n.node.expr.xreplace({symbol: length})) for n in sizes[2:]]
        for length in range(lowest, highest + 1)
    ]


class NearestUpsampleRule(Rule):
    """aten.upsample_nearest{1,2,3}d with integer factors -> copies, cat, interleave."""

    name = "nearest_upsample"

    def matches(self, node: Node) -> bool:
        return (node.op == "call_function" and node.target in UPSAMPLE_NEAREST) or is_spatial_gather(node)

    def check(self, node: Node, editor: ProgramEditor) -> ReplicatePlan | Skip:
        if is_dynamically_quantized(editor.graph):
            return Skip(DYNAMIC_INT8_REASON)
        if node.target in UPSAMPLE_NEAREST:
            spatial = UPSAMPLE_NEAREST[node.target]

            def pick(probe: torch.Tensor) -> torch.Tensor:
                return node.target(probe, *node.args[1:], **node.kwargs)
        else:
            spatial = len(node.args[1]) - 2
            try:
                indices = [editor.constant_value(i) for i in node.args[1][2:]]
            except NotConstant as why:
                return Skip(f"the gather indices are not constants: {why}")

            def pick(probe: torch.Tensor) -> torch.Tensor:
                return aten.index.Tensor(probe, [None, None, *indices])

        x, y = node.args[0].meta["val"], node.meta["val"]
        if x.dim() != spatial + 2:
            return Skip(f"input of rank {x.dim()}: expected [N, C, spatial...]")
        lengths, outputs = list(x.shape[2:]), list(y.shape[2:])
        if not x.dtype.is_floating_point:
            return Skip(f"{x.dtype} input: only floating point is rewritten")
        factors = [_ratio(o, n) for n, o in zip(lengths, outputs)]
        if None in factors:
            return Skip(f"output {outputs} is not an integer multiple of the input {lengths}")
        if all(r == 1 for r in factors):
            return Skip("scale 1: the upsample copies its input; nothing to gain")
        try:
            probes = _probe_lengths(editor, x)
        except NotConstant as why:
            return Skip(f"dynamic shape {list(x.shape)}: {why}")
        computed: list[Node] = []
        torch.fx.node.map_arg((node.args[1:], node.kwargs), computed.append)
        if computed and node.target in UPSAMPLE_NEAREST:
            return Skip("an output size computed in the graph")
        for probe in probes:
            if not picks_integer_nearest(pick, probe, factors):
                return Skip(
                    f"{probe} -> {[n * r for n, r in zip(probe, factors)]} expected, but PyTorch's index "
                    f"arithmetic does not pick every input {factors} times in a row: not an integer upsample"
                )
        return ReplicatePlan(node, factors, shared_quantization(node))

    def describe(self, plan: ReplicatePlan) -> str:
        text = f"x{'x'.join(map(str, plan.factors))}: {math.prod(plan.factors)} copies + interleave"
        return text + (", int8 with the input's quantization" if plan.quantization else "")

    def apply(self, plan: ReplicatePlan, editor: ProgramEditor) -> None:
        node = plan.node
        x = node.args[0]
        copies = math.prod(plan.factors)
        if plan.quantization is None:
            one = editor.scalar_constant(1.0, x)
            others = [editor.emit(node, aten.mul.Tensor, x, one) for _ in range(copies - 1)]
            phases = editor.emit(node, aten.cat.default, [x, *others], 1)
            editor.replace([node], interleave(editor, node, phases, plan.factors, 1))
            return
        # Quantized: each copy is its own dequantize of the int8 input (distinct nodes for cat, no
        # arithmetic), and every step is requantized with the same parameters: the values stay on
        # the input's int8 grid, exactly, and XNNPACK runs the whole chain in int8.
        source, params = plan.quantization
        requantize = requantizer(editor, node, params)

        dequantized = [editor.emit(node, DEQUANTIZE, source, *params) for _ in range(copies)]
        phases = requantize(editor.emit(node, aten.cat.default, dequantized, 1))
        editor.replace([node], interleave(editor, node, phases, plan.factors, 1, requantize))
