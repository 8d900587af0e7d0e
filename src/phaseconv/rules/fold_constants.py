"""Computations that depend only on parameters and shapes -> constants computed once.

Real decoders recompute such values on every call: DAC's Snake takes 1 / (alpha + 1e-9) of a
parameter, Mimi's transformer builds its causal mask and rotary tables from `arange` and from the
shapes of its activations (`new_ones`), EnCodec's reflect padding computes its gather indices. None of
these is delegated, so each splits the XNNPACK partition. Here every maximal such computation is
evaluated with PyTorch on the program's own constants (shape-only ops see zeros of the right shape)
and replaced by a lifted constant, one per reading node (ExecuTorch cannot lower a constant that two
partitions read). The values are the ones eager PyTorch computes, so numerics do not change.

In a dynamic program, a value computed from a dynamic size (Mimi's mask and rotary tables follow the
length) is folded at the longest length and read through slices to the run-time length, when its value
at every length is the leading block of that (graph/prefix.py checks each length).

This rule runs before the others, so they see the folded program.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.prefix import PrefixConstant, prefix_constant, read_prefix
from phaseconv.graph.program import (
    SHAPE_ONLY,
    DynamicShape,
    NotConstant,
    ProgramEditor,
    is_in_place,
    written_in_place,
)
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
# Reading a constant through these computes nothing: the backend handles them, nothing to fold.
LAYOUT_ONLY = frozenset(
    {
        aten.view.default,
        aten.reshape.default,
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.slice.Tensor,
        aten.select.int,
        aten.alias.default,
        aten.detach.default,
        aten.clone.default,
        aten.contiguous.default,
    }
)
MAX_GROWTH = 4  # a folded value may be at most this many times the constants it reads ...
MAX_GROWN_BYTES = 1 << 20  # ... unless it is smaller than 1 MiB


@dataclass(frozen=True)
class FoldPlan:
    node: Node
    value: torch.Tensor  # a value of a dynamic length: at the longest, read through slices
    readers: tuple[Node, ...]
    prefix: PrefixConstant | None = None


def _is_random(node: Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags


def constant_nodes(editor: ProgramEditor) -> set[Node]:
    """Every call whose inputs are constants, other such calls, or shapes only."""
    constant: set[Node] = set()
    for node in editor.graph.nodes:
        if node.op == "placeholder":
            if editor.is_constant_input(node):
                constant.add(node)
            continue
        if (
            node.op != "call_function"
            or _is_random(node)
            or is_in_place(node)
            or written_in_place(node)
            or "quantize" in str(node.target)
        ):
            continue
        inputs = node.all_input_nodes
        if node.target in SHAPE_ONLY and node.args and isinstance(node.args[0], Node):
            inputs = [n for n in inputs if n is not node.args[0]]
        if all(n in constant for n in inputs):
            constant.add(node)
    return constant


class FoldConstantsRule(Rule):
    """Maximal parameter- and shape-only computations -> lifted constants."""

    name = "fold_constants"
    stage = 0  # before the rewrites, so they see its constants

    def candidates(self, editor: ProgramEditor) -> list[Node]:
        """Calls computing a tensor from constants and shapes that a non-constant node reads."""
        constant = constant_nodes(editor)
        found = []
        for node in editor.graph.nodes:
            if node.op != "call_function" or node not in constant or not isinstance(node.meta.get("val"), torch.Tensor):
                continue
            if all(user in constant for user in node.users):
                continue
            if _computes_something(node, constant):
                found.append(node)
        return found

    def check(self, node: Node, editor: ProgramEditor) -> FoldPlan | Skip:
        prefix = None
        try:
            try:
                value = editor.constant_value(node)
            except DynamicShape:
                prefix = prefix_constant(editor, node)
                value = prefix.value
        except NotConstant as why:
            return Skip(f"not computable ahead of time: {why}")
        except Exception as error:  # an op that cannot run eagerly on its own here
            return Skip(f"evaluating it failed: {type(error).__name__}: {error}")
        read_bytes = sum(_bytes(n.meta.get("val")) for n in _constant_leaves(node, editor))
        if _bytes(value) > max(MAX_GROWTH * read_bytes, MAX_GROWN_BYTES):
            return Skip(
                f"the folded value ({_bytes(value) / 2**20:.1f} MiB) would be over {MAX_GROWTH}x "
                "the constants it is computed from"
            )
        readers = tuple(user for user in node.users if user.op != "output")
        if len(readers) != len(node.users):
            return Skip("it is a program output")
        return FoldPlan(node, value.detach().clone().contiguous(), readers, prefix)

    def describe(self, plan: FoldPlan) -> str:
        value = plan.value
        text = f"computed once: {str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
        if plan.prefix is not None:
            text += f" at the longest length ({plan.prefix.lengths[-1]}), sliced to the run-time length"
        return text

    def apply(self, plan: FoldPlan, editor: ProgramEditor) -> None:
        for reader in plan.readers:
            key = f"{plan.node.name}_{reader.name}"
            if plan.prefix is not None:
                constant = read_prefix(editor, reader, plan.prefix, plan.value, key)
            else:
                constant = editor.new_constant(plan.value, key)
            reader.replace_input_with(plan.node, constant)
        editor.release(plan.node)


def _computes_something(node: Node, constant: set[Node]) -> bool:
    """Does the constant computation ending at `node` do more than re-lay-out one constant?"""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current in seen or current.op != "call_function":
            continue
        seen.add(current)
        if current.target not in LAYOUT_ONLY:
            return True
        stack.extend(n for n in current.all_input_nodes if n in constant)
    return False


def _constant_leaves(node: Node, editor: ProgramEditor) -> set[Node]:
    stack, seen, leaves = [node], set(), set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.op == "placeholder":
            if editor.is_constant_input(current):
                leaves.add(current)
            continue
        shape_only = current.args[0] if current.target in SHAPE_ONLY else None
        stack.extend(n for n in current.all_input_nodes if n is not shape_only)
    return leaves


def _bytes(value) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0
