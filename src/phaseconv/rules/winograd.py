"""A convolution of 2-3 taps per axis -> Winograd's F(2, r) on each axis: fewer, shorter GEMMs.

On an axis of r taps, tiles of two outputs read r + 1 input samples; with B^T, G and A^T of
`math/winograd.py` (the identity on an axis of one tap, as a lifted 1-D convolution's width):

    d_e = sum_j (B^T_1[e_1, j_1] ... B^T_D[e_D, j_D]) xp[2i + j]    per point e: a depthwise
                                                                     convolution of stride 2
    m_e = U_e d_e,  U_e = sum_k G_1[e_1, k_1] ... G_D[e_D, k_D] W[:, :, k]    a 1x1 convolution
    y[2i + q] = sum_e A^T_1[q_1, e_1] ... A^T_D[q_D, e_D] m_e[i]     sums, axis by axis

then the outputs of each tile interleaved. Each row of B^T has one or two nonzeros, evenly spaced:
in 2-D a point's depthwise convolution reads only those (at most 2x2 taps, dilated), from the
padded input sliced at its first nonzero. 1-D F(2, 3) does 4/6 of the direct form's multiply-adds,
F(2, 2) (every polyphase convolution of a k = 2s transposed convolution) 3/4, a 3x3 kernel 16/36.
The transforms have entries 0 and +-1 (exact); only the weights' G carries halves, applied once
in float64. The bias goes on the point whose products reach every output once.

A strided convolution (k taps, stride s on an axis) is first a stride-1 one of ceil(k/s) taps over
the input's s phases stacked on channels (space to depth; `math/polyphase.py`): a stride-2 3x3
becomes F(2, 2x2) over 4x the channels, 9 GEMMs of a quarter of the positions, as many
multiply-adds as XNNPACK's IGEMM does, at GEMM speed.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.interleave import interleave, space_to_depth
from phaseconv.graph.padding import pad_spatial
from phaseconv.graph.program import ProgramEditor
from phaseconv.math.polyphase import phase_taps, strided_as_phases_weight
from phaseconv.math.winograd import row_support, tile_outputs, transforms
from phaseconv.rules.base import Skip
from phaseconv.rules.im2col import CONVOLUTIONS, _settings
from phaseconv.rules.lift_1d import lift_convolution

aten = torch.ops.aten
# XNNPACK's depthwise kernels read 3, 4, 9 or 25 taps in one pass: a point's dense kernel up to 4
# taps (1-D) runs as it is; past that (2-D: 9 or 16, mostly zeros) each point reads only its
# nonzero taps (2 per axis, or 1) from a slice of the padded input (3 slices for 3x3), which
# measured here 0.17-0.19 ms against 0.91 for a dense 4x4 (64 channels, 130x130 in, stride 2).
DENSE_TAPS = 4


@dataclass(frozen=True)
class WinogradPlan:
    node: Node
    kernel: tuple[int, ...]  # taps per spatial axis (1: the identity)
    padding: tuple[int, ...]
    outputs: tuple[int, ...]  # output positions per spatial axis
    stride: tuple[int, ...]  # > 1: the input's phases go on channels first, the kernel folded

    @property
    def tiles(self) -> tuple[int, ...]:
        return tuple(-(-n // tile_outputs(r)) for n, r in zip(self.outputs, self.kernel))


class WinogradRule:
    """Convolutions of 2-3 taps per axis (after folding a stride) -> F(2, r): strided depthwise
    transforms, GEMMs, sums."""

    name = "winograd"
    stage = 4  # after lift_1d, before im2col (which would take the convolution as it is)

    def __init__(self, taps: tuple[int, ...] = (2, 3), min_channels: int = 32):
        self.taps = taps
        self.min_channels = min_channels  # both in and out: the GEMMs must outweigh the transforms

    def matches(self, node: Node) -> bool:
        if node.op != "call_function" or node.target not in CONVOLUTIONS or not isinstance(node.args[1], Node):
            return False
        kernel = node.args[1].meta["val"].shape[2:]
        folded = phase_taps(kernel, _settings(node, CONVOLUTIONS[node.target])[0])  # over the input's phases
        return all(k in (1, *self.taps) for k in folded) and any(k > 1 for k in kernel)

    def check(self, node: Node, editor: ProgramEditor) -> WinogradPlan | Skip:
        spatial = CONVOLUTIONS[node.target]
        stride, padding, dilation, groups = _settings(node, spatial)
        if groups != 1:
            return Skip(f"grouped convolution ({groups} groups)")
        if any(d != 1 for d in dilation):
            return Skip(f"dilation {dilation}: tiles of two outputs need neighbouring taps")
        value, w = node.meta["val"], node.args[1].meta["val"]
        kernel = phase_taps(w.shape[2:], stride)  # over the input's phases
        if all(k == 1 for k in kernel):
            return Skip(f"stride {stride} as large as the kernel: no two outputs share an input")
        if value.dtype != torch.float32:
            return Skip(f"{value.dtype} convolution: measured for float32")
        declined = _dynamic_length_declined(node.args[0].meta["val"].shape, value.shape, w.shape, stride)
        if declined:
            return Skip(declined)
        if value.dim() != spatial + 2:
            return Skip("an unbatched input")
        constants = [node.args[1]] + ([node.args[2]] if len(node.args) > 2 and node.args[2] is not None else [])
        if not all(isinstance(n, Node) and editor.is_constant_input(n) for n in constants):
            return Skip("weight or bias computed in the graph (quantized, or derived)")
        in_channels = w.shape[1] * math.prod(stride)
        if min(w.shape[0], in_channels) < self.min_channels:
            return Skip(f"{in_channels} -> {w.shape[0]} channels: the transforms cost more than the GEMMs save here")
        outputs = tuple(value.shape[2:])
        if any(k > 1 and n < 2 for k, n in zip(kernel, outputs)):
            return Skip("a single output along a transformed axis: no tile of two")
        return WinogradPlan(node, kernel, tuple(padding), outputs, tuple(stride))

    def describe(self, plan: WinogradPlan) -> str:
        taps = "x".join(str(k) for k in plan.kernel if k > 1)
        points = math.prod(k + tile_outputs(k) - 1 for k in plan.kernel)
        form = f"F(2, {taps}): {points} GEMMs of {math.prod(plan.tiles)} tiles"
        if any(s > 1 for s in plan.stride):
            original = math.prod(plan.node.args[1].meta["val"].shape[2:])
            return f"stride {list(plan.stride)}: input phases on channels, then {form} instead of {original}"
        return f"{form} instead of {math.prod(plan.kernel)}"

    def _again(self, node: Node, editor: ProgramEditor) -> WinogradPlan:
        """The plan of the convolution that replaced the planned one (the conditions checked hold)."""
        plan = self.check(node, editor)
        assert isinstance(plan, WinogradPlan), plan
        return plan

    def apply(self, plan: WinogradPlan, editor: ProgramEditor) -> None:
        if plan.node.target == aten.conv1d.default:  # alone, not lifted: its ops then read one view
            plan = self._again(lift_convolution(editor, plan.node), editor)
        if any(s > 1 for s in plan.stride):
            plan = self._again(_phases_on_channels(editor, plan), editor)
        node = plan.node
        x, weight = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        channels, lengths = x.meta["val"].shape[1], x.meta["val"].shape[2:]
        per_axis = [transforms(k) for k in plan.kernel]
        steps = [tile_outputs(k) for k in plan.kernel]
        pads = []
        for k, p, length, tiles, step in zip(plan.kernel, plan.padding, lengths, plan.tiles, steps):
            static = isinstance(length, int)  # a dynamic length has whole tiles (checked): p after
            pads.append((p, step * tiles + k - 1 - (length + p) if static else p))  # the last tile's samples
        padded = pad_spatial(editor, node, x, pads)
        points = list(itertools.product(*[range(b.shape[0]) for b, _, _ in per_axis]))
        carrier = next(e for e in points if all(a[:, i].eq(1).all() for (_, _, a), i in zip(per_axis, e)))
        sparse = math.prod(b.shape[1] for b, _, _ in per_axis) > DENSE_TAPS
        windows = _Windows(editor, node, padded, steps, plan.tiles)
        products, zeros = {}, [0] * len(steps)
        for e in points:
            name = "_".join(map(str, e))
            rows = [b[i] for (b, _, _), i in zip(per_axis, e)]
            taps, offsets, dilation = zip(*[row_support(r) if sparse else (r, 0, 1) for r in rows])
            kernel = _outer(list(taps)).float()
            kernel = kernel.expand(channels, 1, *kernel.shape).contiguous()  # one per channel: depthwise
            transform = editor.new_constant(kernel, f"{node.name}_in{name}")
            window = windows.at(offsets, [d * (len(t) - 1) + 1 for t, d in zip(taps, dilation)])
            point = editor.emit(node, node.target, window, transform, None, steps, zeros, list(dilation), channels)
            point_weight = editor.derived_constant(weight, f"winograd{name}", _point_weight(plan.kernel, e))
            products[e] = editor.emit(node, node.target, point, point_weight, bias if e == carrier else None)
        for axis, (_, _, a_t) in enumerate(per_axis):  # the output transform, one axis at a time
            sums = {}
            for key in products:
                for q in range(a_t.shape[0]):
                    out_key = (*key[:axis], q, *key[axis + 1 :])
                    if out_key not in sums:
                        terms = [(products[(*key[:axis], e, *key[axis + 1 :])], a_t[q, e]) for e in range(a_t.shape[1])]
                        sums[out_key] = _signed_sum(editor, node, terms)
            products = sums
        phases = [products[q] for q in itertools.product(*[range(s) for s in steps])]  # phase-major
        out = editor.emit(node, aten.cat.default, phases, 1) if len(phases) > 1 else phases[0]
        out = interleave(editor, node, out, steps, 1)
        for axis, (n, step, tiles) in enumerate(zip(plan.outputs, steps, plan.tiles)):
            if isinstance(n, int) and step * tiles != n:
                out = editor.emit(node, aten.slice.Tensor, out, 2 + axis, 0, n)
        editor.replace([node], out)


def _dynamic_length_declined(in_shape, out_shape, weight_shape, stride) -> str | None:
    """Why a convolution with a dynamic size is left alone, or None (also when it has none): one
    output length may be dynamic, known to be even, so that its tiles are whole and need no crop
    of run-time length (XNNPACK delegates no slice of a dynamic size), on a 1-D kernel (whose
    points read the padded input whole) with stride 1."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    dynamic = [axis for axis, n in enumerate(out_shape) if not isinstance(n, int)]
    if not dynamic and all(isinstance(n, int) for n in in_shape):
        return None
    if len(dynamic) != 1 or dynamic[0] < 2 or sum(not isinstance(n, int) for n in in_shape) != 1:
        return "dynamic sizes other than one length"
    if any(s != 1 for s in stride) or sum(k > 1 for k in weight_shape[2:]) != 1:
        return "a dynamic length with a stride or a 2-D kernel: the points would read slices of run-time length"
    if weight_shape[dynamic[0]] == 1:
        return "a dynamic length on an axis of one tap"
    length = out_shape[dynamic[0]]
    if not statically_known_true(length % 2 == 0):
        return f"a dynamic length not known to be even ({length}): its last tile would need a crop of run-time length"
    return None


def _phases_on_channels(editor: ProgramEditor, plan: WinogradPlan) -> Node:
    """The strided convolution as a stride-1 one over its padded input's phases stacked on
    channels (`math.polyphase.strided_as_phases_weight`): the input padded, or cut, to
    s * (outputs + folded kernel - 1) per axis, then space to depth."""
    node, stride = plan.node, list(plan.stride)
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    lengths = x.meta["val"].shape[2:]
    needed = [s * (n + k - 1) for s, n, k in zip(stride, plan.outputs, plan.kernel)]
    pads = [(p, max(0, n - p - size)) for p, n, size in zip(plan.padding, needed, lengths)]
    padded = pad_spatial(editor, node, x, pads)
    for axis, n in enumerate(needed):
        if padded.meta["val"].shape[2 + axis] != n:
            padded = editor.emit(node, aten.slice.Tensor, padded, 2 + axis, 0, n)
    phases = space_to_depth(editor, node, padded, stride)
    folded = editor.derived_constant(weight, "phases", lambda w: strided_as_phases_weight(w, stride))
    stride_1 = editor.emit(node, node.target, phases, folded, bias)
    editor.replace([node], stride_1)
    return stride_1


class _Windows:
    """The padded input from an offset on per axis, cut where a kernel of the given span would
    make more than `tiles` outputs; slices shared by the points that start at the same offsets (a
    point's sparse kernel skips the zero taps before its first, so it reads the input from there)."""

    def __init__(self, editor: ProgramEditor, anchor: Node, padded: Node, steps: list[int], tiles: tuple[int, ...]):
        self.editor, self.anchor, self.steps, self.tiles = editor, anchor, steps, tiles
        self.lengths = list(padded.meta["val"].shape[2:])
        self.cache: dict[tuple, Node] = {(): padded}

    def at(self, offsets: tuple[int, ...], spans: list[int]) -> Node:
        if not all(isinstance(n, int) for n in self.lengths):  # a dense 1-D kernel (checked): all of it
            return self.cache[()]
        key: tuple = ()
        for axis, (offset, span, step, tiles) in enumerate(zip(offsets, spans, self.steps, self.tiles)):
            end = min(offset + step * tiles + span - 1, self.lengths[axis])
            parent, key = self.cache[key], (*key, (offset, end))
            if key not in self.cache:
                whole = offset == 0 and end == self.lengths[axis]
                slice_ = (aten.slice.Tensor, parent, 2 + axis, offset, end)
                self.cache[key] = parent if whole else self.editor.emit(self.anchor, *slice_)
        return self.cache[key]


def _outer(vectors: list[torch.Tensor]) -> torch.Tensor:
    """The outer product of 1-D tensors: the separable depthwise kernel of one point."""
    result = vectors[0]
    for vector in vectors[1:]:
        result = result.unsqueeze(-1) * vector
    return result


def _point_weight(kernel: tuple[int, ...], e: tuple[int, ...]):
    """W[o, c, k...] -> U_e[o, c, 1...] = sum_k G_1[e_1, k_1] ... G_D[e_D, k_D] W[o, c, k], in float64."""

    def compute(weight: torch.Tensor) -> torch.Tensor:
        combined = weight.double()
        for axis, (k, i) in enumerate(zip(kernel, e)):
            g = transforms(k)[1][i]
            combined = torch.tensordot(combined, g, dims=([2 + axis], [0])).unsqueeze(-1).movedim(-1, 2 + axis)
        return combined.to(weight.dtype)

    return compute


def _signed_sum(editor: ProgramEditor, anchor: Node, terms: list[tuple[Node, torch.Tensor]]) -> Node:
    """sum of sign * term for signs in {-1, 0, 1}, as adds and subs (a positive term first)."""
    kept = sorted(((n, float(s)) for n, s in terms if s != 0), key=lambda term: term[1] < 0)
    assert all(abs(s) == 1 for _, s in kept) and kept[0][1] > 0, [s for _, s in kept]
    total = kept[0][0]
    for term, sign in kept[1:]:
        total = editor.emit(anchor, aten.add.Tensor if sign > 0 else aten.sub.Tensor, total, term)
    return total
