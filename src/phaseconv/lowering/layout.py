"""Views and permutes inside the XNNPACK delegate as at most one transpose of the buffer.

XNNPACK runs convolutions channels-last (NHWC) and every view in NCHW, so ExecuTorch's layout pass
(ChannelsLastTaggedReshapePass) puts a transpose before each view of a convolution's output and
one after it when a convolution reads the result. A 1-D polyphase interleave after a convolution,
`[N, s*C, Q, 1] -> view [N, s, C, Q] -> permute -> view [N, C, Q*s, 1]`, then costs three
transposes, though in NHWC it moves nothing: offset `(q*s*C + j*C + c)` of the phase-major
convolution output is offset `((q*s + j)*C + c)` of the interleaved signal. A 2-D interleave moves
whole rows of `s*C` values once; attention's `transpose(1, 2)` pairs cancel.

For every chain of views and permutes whose links have no other readers, these passes compute what
the chain does to its source's buffer (`phaseconv.math.transposes`) and emit that instead: one
reshape, or a reshape, one transpose and a reshape (XNNPACK's reshape takes the physical shape):

- `CollapseShapeChainsPass` (before the layout pass): chains in the logical layout;
- `ChannelsLastChainsPass` (the layout pass itself, extended): a chain that starts at a
  channels-last tensor ends channels-last when it ends in 4-D and nothing it feeds needs NCHW, so
  the ops after a convolution's interleave stay channels-last too. A chain ending where NCHW is
  needed (the program's output) whose one transpose would gather single values (a 2-D interleave
  straight to NCHW) is moved in rows on the buffer instead, and the pass's own NHWC -> NCHW
  transpose follows: the two are faster than the one (ETDump).

In an int8 program each link of a chain is read through a quantize -> dequantize pair with the
parameters of the chain's source (an int8 view or permute, exact); the chain moved on the buffer gets
the same pairs between its links. A chain is left as it is when it has a dynamic size, a link
quantized otherwise, more than six axes to transpose, or no transpose to save.
"""

from __future__ import annotations

import torch
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
from executorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
from executorch.backends.xnnpack.utils.quant_utils import tag_as_implicit_q_dq
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult
from torch.fx import Node

from phaseconv.math.transposes import FlatTranspose, as_flat_transpose, physical_offsets

edge = exir_ops.edge.aten
VIEW, PERMUTE = edge.view_copy.default, edge.permute_copy.default
QUANTIZE, DEQUANTIZE = (
    exir_ops.edge.quantized_decomposed.quantize_per_tensor.default,
    exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default,
)
SHAPE_OPS = {VIEW, PERMUTE, edge.squeeze_copy.dim, edge.squeeze_copy.dims, edge.unsqueeze_copy.default}
NHWC = ChannelsLastTaggedReshapePass.XNN_NHWC_NODE
MAX_TRANSPOSE_DIMS = 6  # XNNPACK's transpose


def _is_shape_op(node: Node) -> bool:
    return node.op == "call_function" and node.target in SHAPE_OPS


def _static_float(node: Node) -> bool:
    value = node.meta.get("val")
    return (
        isinstance(value, torch.Tensor)
        and value.dtype.is_floating_point
        and all(isinstance(size, int) for size in value.shape)
    )


def _replay(node: Node, value: torch.Tensor) -> torch.Tensor:
    """What shape op `node` does to `value` (a tensor of buffer offsets)."""
    if node.target == VIEW:
        return value.reshape(node.args[1])
    if node.target == PERMUTE:
        return value.permute(node.args[1])
    if node.target == edge.unsqueeze_copy.default:
        return value.unsqueeze(node.args[1])
    return value.squeeze(node.args[1])


def _only_reader(node: Node) -> Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _is_with(node: Node | None, target, params: tuple) -> bool:
    return node is not None and node.target == target and tuple(node.args[1:]) == params


def _chain_from(first: Node, params: tuple | None = None) -> tuple[list[Node], Node] | None:
    """`first` and the shape ops after it, each the only reader of the one before, up to the first
    with more readers or a reader that is not a shape op, and the chain's end: its last op or, in an
    int8 chain (`params`, each link read through a quantize -> dequantize pair with them), the
    quantize after it. None if a link is dynamic, not float, or quantized otherwise."""
    chain = [first]
    while True:
        end = chain[-1]
        if params is not None:  # the link's quantize, then the next link behind its dequantize
            end = _only_reader(end)
            if not _is_with(end, QUANTIZE, params):
                return None
        reader = _only_reader(end)
        if params is not None and reader is not None:
            reader = _only_reader(reader) if _is_with(reader, DEQUANTIZE, params) else None
        if reader is None or not _is_shape_op(reader):
            break
        chain.append(reader)
    return (chain, end) if all(_static_float(node) for node in chain) else None


def _is_quantize_op(node: Node) -> bool:
    return node.op == "call_function" and "quantize" in str(node.target)


def _flat_transpose(source: Node, chain: list[Node], source_nhwc: bool, end_nhwc: bool) -> FlatTranspose | None:
    """What `chain` does to the buffer of `source` (channels-last if `source_nhwc`), its end laid
    out channels-last if `end_nhwc`; None if that is not one transpose XNNPACK can run."""
    offsets = physical_offsets(list(source.meta["val"].shape), source_nhwc)
    for node in chain:
        offsets = _replay(node, offsets)
    if end_nhwc:
        offsets = offsets.permute(0, 2, 3, 1)
    found = as_flat_transpose(offsets)
    return found if found is not None and len(found.dims) <= MAX_TRANSPOSE_DIMS else None


def _emit(
    graph, source: Node, transpose: FlatTranspose, end: Node, end_nhwc: bool, params: tuple | None = None
) -> Node:
    """source -> [view to dims -> permute] -> view to end's shape, before `end`. Only the last
    node carries a layout tag: XNNPACK takes the others' shapes as the buffer's. With `params` (an
    int8 chain), each link is quantized with them, dequantized before the next: returns the last
    quantize."""
    fake = source.meta["val"]
    shape = list(end.meta["val"].shape)

    def link(target, value, argument, size):
        node = graph.call_function(target, (value, argument))
        node.meta["val"] = fake.new_empty(size)
        if params is None:
            return node
        q = graph.call_function(QUANTIZE, (node, *params))
        q.meta["val"] = fake.new_empty(size, dtype=params[-1])
        tag_as_implicit_q_dq(q)
        return q

    def read(value):
        if params is None:
            return value
        dq = graph.call_function(DEQUANTIZE, (value, *params))
        dq.meta["val"] = fake.new_empty(value.meta["val"].shape)
        tag_as_implicit_q_dq(dq)
        return dq

    with graph.inserting_before(end):
        current = source
        if transpose.moves:
            current = link(VIEW, current, list(transpose.dims), transpose.dims)
            moved = [transpose.dims[axis] for axis in transpose.perm]
            current = link(PERMUTE, read(current), list(transpose.perm), moved)
            current = read(current)
        out = link(VIEW, current, shape, shape)
        if end_nhwc:
            out.meta[NHWC] = True
            if params is not None:  # the layout pass reads a dequantize's layout from its quantize's input
                out.args[0].meta[NHWC] = True
    return out


def _transposes(chain: list[Node]) -> int:
    return sum(node.target == PERMUTE for node in chain)


def _cost(transpose: FlatTranspose) -> tuple[int, int]:
    """(transposes, nodes) of what `_emit` puts in a chain's place."""
    return (1, 3) if transpose.moves else (0, 1)


class CollapseShapeChainsPass(XNNPACKPass):
    """Chains of views and permutes -> one reshape, or reshape, transpose, reshape (logical layout)."""

    def call(self, graph_module):
        graph = graph_module.graph
        changed = False
        for node in list(graph.nodes):
            first_of_chain = _is_shape_op(node) and not (_is_shape_op(node.args[0]) and len(node.args[0].users) == 1)
            if not first_of_chain:
                continue
            found = _chain_from(node)
            source = node.args[0]
            if found is None or len(found[0]) < 2 or not _static_float(source) or _is_quantize_op(source):
                continue
            chain, end = found
            transpose = _flat_transpose(source, chain, False, False)
            if transpose is None or _cost(transpose) >= (_transposes(chain), len(chain)):
                continue
            end.replace_all_uses_with(_emit(graph, source, transpose, end, False))
            changed = True
        if changed:
            graph.eliminate_dead_code()
            graph_module.recompile()
        return PassResult(graph_module, changed)


class ChannelsLastChainsPass(ChannelsLastTaggedReshapePass):
    """ExecuTorch's layout pass, where a chain of views and permutes read from a channels-last
    tensor is moved on its buffer (at most one transpose) instead of through NCHW (two or three)."""

    def input_to_nchw(self, graph_module, input_node: Node, target_node: Node) -> None:
        if not (_is_shape_op(target_node) and self._moved_on_buffer(graph_module.graph, input_node, target_node)):
            super().input_to_nchw(graph_module, input_node, target_node)

    def _moved_on_buffer(self, graph, source: Node, first: Node) -> bool:
        if not (ChannelsLastTaggedReshapePass.is_nhwc_node(source) and source.op == "call_function"):
            return False
        if not _static_float(source):
            return False
        params = tuple(source.args[1:]) if source.target == DEQUANTIZE else None  # an int8 chain
        if params is None and _is_quantize_op(source):
            return False
        found = _chain_from(first, params)
        if found is None:
            return False
        chain, end = found
        if params is None:
            if any(_is_quantize_op(user) for user in end.users):
                return False
            readers = list(end.users)
        else:
            if any(user.target != DEQUANTIZE for user in end.users):
                return False
            readers = [reader for dq in end.users for reader in dq.users]
        last = chain[-1]
        wants_nchw = any(user.op == "output" or self.requires_nchw_inputs(user) for user in readers)
        end_nhwc = last.meta["val"].dim() == 4 and not wants_nchw
        transpose = _flat_transpose(source, chain, True, end_nhwc)
        # through NCHW: a transpose out of NHWC, the chain's own, one back when its end is NHWC
        if transpose is None or transpose.moves >= 1 + _transposes(chain) + end_nhwc:
            return False
        if wants_nchw and last.meta["val"].dim() == 4 and transpose.moves and not transpose.copies_rows:
            in_rows = _flat_transpose(source, chain, True, True)  # then the pass's own NHWC -> NCHW
            if in_rows is not None and in_rows.copies_rows and in_rows.moves <= _transposes(chain):
                transpose, end_nhwc = in_rows, True
        end.replace_all_uses_with(_emit(graph, source, transpose, last, end_nhwc, params))
        return True

    def call(self, graph_module):
        result = super().call(graph_module)
        result.graph_module.graph.eliminate_dead_code()  # the chains moved on the buffer
        result.graph_module.recompile()
        return result
