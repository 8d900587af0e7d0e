"""Values computed from shapes alone in a dynamic program: their value at the longest length, sliced.

A causal mask or a rotary table built from `arange(L)` changes with the length L, so it is not a
constant; but when its value at every length of the declared range is the leading block of its
value at the longest,

    v(L) = v(L_max)[:n_0(L), ..., :n_k(L)],   n_i(L) = a_i L + b_i,

it is that one constant read through slices to run-time sizes. This is checked at every length of
the range (evaluated with PyTorch, compared bit for bit), so it is exact, not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor

aten = torch.ops.aten
MAX_LENGTHS = 4096  # lengths checked one by one; a wider range is declined


@dataclass(frozen=True)
class PrefixConstant:
    value: torch.Tensor  # at the longest length
    symbol: sympy.Symbol
    sizes: tuple[tuple[int, int, int], ...]  # (dim, a, b): that dim is a * L + b long
    lengths: range

    def at(self, length: int) -> torch.Tensor:
        """The value at `length`: the leading block of the value at the longest."""
        index = [slice(None)] * self.value.dim()
        for dim, a, b in self.sizes:
            index[dim] = slice(0, a * length + b)
        return self.value[tuple(index)]


def prefix_constant(editor: ProgramEditor, node: Node) -> PrefixConstant:
    """`node`'s value as a PrefixConstant, or NotConstant saying why it is not one."""
    symbol = editor.dynamic_symbol()
    editor.size_source(symbol)  # the slices read the run-time size from there
    lowest, highest = editor.declared_bounds(symbol)
    if highest - lowest >= MAX_LENGTHS:
        raise NotConstant(f"the length's range ({lowest}..{highest}) is too wide to check at every length")
    sizes = []
    for dim, size in enumerate(node.meta["val"].shape):
        if isinstance(size, int):
            continue
        expr = sympy.expand(size.node.expr)
        a, b = expr.coeff(symbol), expr.subs(symbol, 0)
        if expr.free_symbols != {symbol} or not (a.is_Integer and b.is_Integer) or sympy.expand(a * symbol + b - expr):
            raise NotConstant(f"its size {size} is not a whole multiple of the length plus a constant")
        sizes.append((dim, int(a), int(b)))
    prefix = PrefixConstant(editor.value_at(node, {symbol: highest}), symbol, tuple(sizes), range(lowest, highest + 1))
    for length in prefix.lengths:
        value = editor.value_at(node, {symbol: length})
        if value.shape != prefix.at(length).shape or not torch.equal(value, prefix.at(length)):
            raise NotConstant(f"its value at length {length} is not the leading block of its value at {highest}")
    return prefix


def read_prefix(editor: ProgramEditor, anchor: Node, prefix: PrefixConstant, value: torch.Tensor, key: str) -> Node:
    """`value` (the prefix value, maybe re-laid-out with the same sized dims) as a constant (editor.new_constant's
    `key`) sliced to the run-time sizes.

    A sized dim after a dim longer than one is stored one longer than its longest run-time size, so that
    no slice of it has a contiguous tensor's strides at any length: the export's retrace asks whether a
    slice is contiguous, and where the answer depends on the length it fixes the length (the program's
    input becomes static)."""
    padded = [dim for dim, _, _ in prefix.sizes if any(size > 1 for size in value.shape[:dim])]
    stored = value
    if padded:
        shape = [size + (dim in padded) for dim, size in enumerate(value.shape)]
        stored = value.new_zeros(shape)
        stored[tuple(slice(0, size) for size in value.shape)] = value
    read = editor.new_constant(stored, key)
    for dim, a, b in prefix.sizes:
        read = editor.emit(anchor, aten.slice.Tensor, read, dim, 0, editor.symbolic_size(prefix.symbol, a, b))
    return read
