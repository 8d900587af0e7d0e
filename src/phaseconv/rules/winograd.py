"""A convolution of 2-3 taps per axis (or up to 11 on one) -> Winograd's F(2, r): fewer, shorter GEMMs.

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

A 1-D kernel of 4-11 taps is cut into chunks of 3 (`math.winograd.axis_form`): each point's GEMM
reads its members' transforms stacked on channels, and a chunk at an even offset reads the same
transform as the first, shifted by whole tiles (one at an odd offset the transform one sample on):
per point one GEMM over K = members x C, 10 products of C channels per two outputs for 7 taps
instead of 14, 15 for 11 instead of 22, from 6-8 distinct depthwise transforms.

A strided convolution (k taps, stride s on an axis) is first a stride-1 one of ceil(k/s) taps over
the input's s phases stacked on channels (space to depth; `math/polyphase.py`): a stride-2 3x3
becomes F(2, 2x2) over 4x the channels, 9 GEMMs of a quarter of the positions, as many
multiply-adds as XNNPACK's IGEMM does, at GEMM speed.

A 1-D convolution of 32-63 channels and 5-11 taps (on its grid, if dilated) is first folded in time (`math/polyphase.py:
folded_in_time_weight`): two phases of its input to two of its output, on channels, 2C -> 2O of
ceil((k + 1) / 2) taps (space to depth, the convolution, the interleave), which the chunks then take:
more multiply-adds (8/7 for k7), in GEMMs twice as wide.

A 1-D convolution dilated by d reads sample t = d*i + j at (i, j) of its padded input viewed as
[N, C, L/d, d] (channels-last, the same buffer), where it is undilated along i: the view, then
F(2, r) on that grid, then the output viewed back and cut to its length.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import torch
from torch.fx import Node

from phaseconv.graph.interleave import interleave, space_to_depth
from phaseconv.graph.padding import pad_spatial
from phaseconv.graph.program import ProgramEditor, weighted_operands
from phaseconv.math.polyphase import folded_in_time_weight, phase_taps, strided_as_phases_weight
from phaseconv.math.winograd import (
    CHUNK,
    axis_form,
    member_reads,
    members,
    outer,
    point_weight,
    points,
    tile_outputs,
)
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.im2col import CONVOLUTIONS, _settings
from phaseconv.rules.lift_1d import lift_convolution

aten = torch.ops.aten
FOLD = 2  # the phases a narrow long convolution's time is folded into


@dataclass(frozen=True)
class WinogradPlan:
    node: Node
    kernel: tuple[int, ...]  # taps per spatial axis (1: the identity)
    padding: tuple[int, ...]
    outputs: tuple[int, ...]  # output positions per spatial axis
    stride: tuple[int, ...]  # > 1: the input's phases go on channels first, the kernel folded
    dilation: tuple[int, ...]  # > 1 (a 1-D kernel): the input viewed as a grid of d columns first
    fold: int = 1  # > 1 (a narrow 1-D kernel): that many phases of time on channels first

    @property
    def tiles(self) -> tuple[int, ...]:
        return tuple(-(-n // tile_outputs(r)) for n, r in zip(self.outputs, self.kernel))


class WinogradRule(Rule):
    """Convolutions of 2-3 taps per axis (after folding a stride) -> F(2, r): strided depthwise
    transforms, GEMMs, sums."""

    name = "winograd"
    stage = 4  # after lift_1d, before im2col (which would take the convolution as it is)

    def __init__(
        self,
        max_taps: int = 11,
        min_channels: int = 32,
        min_long_channels: int = 64,
        min_fold_taps: int = 5,
        square_only: bool = False,
        large_outputs: float = math.inf,
        min_large_channels: int = 0,
    ):
        self.max_taps = max_taps  # on one axis of a 1-D kernel, in chunks of CHUNK; else CHUNK per axis
        self.min_channels = min_channels  # both in and out: the GEMMs must outweigh the transforms
        # ... for chunks or a grid, where 32 channels lose (`python benchmarks/variants.py --only "steps (winograd)"`)
        self.min_long_channels = min_long_channels
        # ... below that, a kernel of this many taps or more is folded in time to twice the channels
        # (`--only "steps (fold)"`; a k3 stays F(2, 3))
        self.min_fold_taps = min_fold_taps
        # only stride-1, undilated 2-D kernels of 2-3 taps on both axes (targets.py: x86-avx512)
        self.square_only = square_only
        # above this many output positions, both in and out need `min_large_channels`: the transformed
        # inputs and products (4x the input and output for F(2, 3x3)) then outgrow the caches
        self.large_outputs = large_outputs
        self.min_large_channels = min_large_channels

    def matches(self, node: Node) -> bool:
        if node.op != "call_function" or node.target not in CONVOLUTIONS or not isinstance(node.args[1], Node):
            return False
        kernel = node.args[1].meta["val"].shape[2:]
        folded = phase_taps(kernel, _settings(node, CONVOLUTIONS[node.target])[0])  # over the input's phases
        return all(k <= self.max_taps for k in folded) and any(k > 1 for k in kernel)

    def check(self, node: Node, editor: ProgramEditor) -> WinogradPlan | Skip:
        spatial = CONVOLUTIONS[node.target]
        stride, padding, dilation, groups = _settings(node, spatial)
        if groups != 1:
            return Skip(f"grouped convolution ({groups} groups)")
        value, w = node.meta["val"], node.args[1].meta["val"]
        if any(d != 1 for d in dilation):
            declined = _dilation_declined(w.shape, value.shape, stride, dilation)
            if declined:
                return Skip(f"dilation {dilation}: {declined}")
        if self.square_only and (
            spatial != 2
            or any(k == 1 for k in w.shape[2:])
            or any(s != 1 for s in stride)
            or any(d != 1 for d in dilation)
        ):
            return Skip(f"{list(w.shape[2:])} kernel, stride {stride}: this target takes stride-1 2-D kernels only")
        kernel = phase_taps(w.shape[2:], stride)  # over the input's phases
        if all(k == 1 for k in kernel):
            return Skip(f"stride {stride} as large as the kernel: no two outputs share an input")
        if any(k > CHUNK for k in kernel):
            if sum(k > 1 for k in kernel) > 1 or any(s != 1 for s in stride):
                return Skip(f"{list(kernel)} taps, stride {stride}: chunks of {CHUNK} are for 1-D kernels, stride 1")
            if not all(isinstance(n, int) for n in value.shape):
                return Skip("a dynamic length on more than 3 taps: the chunks would read slices of run-time length")
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
        long = any(k > CHUNK for k in kernel) or any(d != 1 for d in dilation)
        fold = 1
        if min(w.shape[0], in_channels) < (self.min_long_channels if long else self.min_channels):
            if not self._folds(w.shape, value.shape, stride, dilation):
                form = " in chunks or a grid" if long else ""
                costs = f"the transforms{form} cost more than the GEMMs save"
                return Skip(f"{in_channels} -> {w.shape[0]} channels: {costs}")
            fold = FOLD
        static = all(isinstance(n, int) for n in value.shape)
        if (
            static
            and math.prod(value.shape[2:]) > self.large_outputs
            and min(w.shape[0], in_channels) < self.min_large_channels
        ):
            size = "x".join(str(n) for n in value.shape[2:])
            return Skip(
                f"{in_channels} -> {w.shape[0]} channels at {size} outputs: beyond {self.large_outputs} positions "
                f"this target needs {self.min_large_channels} channels in and out (the transforms outgrow the caches)"
            )
        plan = WinogradPlan(node, kernel, tuple(padding), tuple(value.shape[2:]), tuple(stride), tuple(dilation), fold)
        transformed = _transformed(plan)
        if any(k > 1 and n < 2 for k, n in zip(transformed.kernel, transformed.outputs)):
            return Skip("a single output along a transformed axis: no tile of two")
        return plan

    def _folds(self, weight_shape, out_shape, stride, dilation) -> bool:
        """Whether a narrow convolution (of static sizes: checked) is folded in time: taps along T
        only (a 1-D kernel, or one on a dilation's grid), stride 1, `min_fold_taps` taps or more,
        from `min_channels` in and out to below `min_long_channels` (32 -> 32 in the models here)."""
        narrowest, widest = min(weight_shape[:2]), max(weight_shape[:2])
        return (
            all(k == 1 for k in weight_shape[3:])
            and all(s == 1 for s in stride)
            and all(d == 1 for d in dilation[1:])
            and weight_shape[2] >= self.min_fold_taps
            and self.min_channels <= narrowest
            and widest < self.min_long_channels <= FOLD * narrowest
        )

    def describe(self, plan: WinogradPlan) -> str:
        taps = "x".join(str(k) for k in plan.kernel if k > 1)
        forms = [axis_form(k) for k in plan.kernel]
        gemms = math.prod(len(f.members) for f in forms)
        form = f"F(2, {taps}): {gemms} GEMMs of {math.prod(plan.tiles)} tiles"
        if any(k > CHUNK for k in plan.kernel):
            stacked = sum(len(members(forms, e)) for e in points(forms))
            reads = itertools.chain(*member_reads(forms, _steps(plan.kernel)).values())
            transforms = len({key for key, _ in reads})
            form += f" over {stacked} stacked inputs ({transforms} input transforms, chunks of {CHUNK} taps)"
        if any(d > 1 for d in plan.dilation):
            grid = f"dilation {list(plan.dilation)}: the input as a grid of {max(plan.dilation)} columns, then "
            return grid + self.describe(_on_grid(plan))
        if plan.fold > 1:
            out_channels, in_channels = plan.node.args[1].meta["val"].shape[:2]
            f = plan.fold
            channels = f"{in_channels} -> {out_channels} channels as {f * in_channels} -> {f * out_channels}"
            return f"time folded by {f} ({channels}), then " + self.describe(_folded(plan))
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
        if any(d > 1 for d in plan.dilation):
            plan = self._again(_dilation_as_grid(editor, plan), editor)
        if plan.fold > 1:
            plan = self._again(_time_on_channels(editor, plan), editor)
        node = plan.node
        x, weight, bias = weighted_operands(node)
        lengths = x.meta["val"].shape[2:]
        forms = [axis_form(k) for k in plan.kernel]
        steps = _steps(plan.kernel)
        pads = []
        for k, p, length, tiles, step in zip(plan.kernel, plan.padding, lengths, plan.tiles, steps):
            static = isinstance(length, int)  # a dynamic length has whole tiles (checked): p after
            pads.append((p, step * tiles + k - 1 - (length + p) if static else p))  # the last tile's samples
        padded = pad_spatial(editor, node, x, pads)
        every_point = points(forms)
        carrier = next(e for e in every_point if all(f.a_t[:, i].eq(1).all() for f, i in zip(forms, e)))
        reads = member_reads(forms, steps)
        keys = dict.fromkeys(key for key, _ in itertools.chain(*reads.values()))
        inputs = _TransformedInputs(editor, node, padded, steps, plan.tiles, keys)
        products = {}
        for e in every_point:
            stacked = [inputs.read(*r) for r in reads[e]]
            point = editor.emit(node, aten.cat.default, stacked, 1) if len(stacked) > 1 else stacked[0]
            name = "_".join(map(str, e))
            weights = editor.derived_constant(weight, f"winograd{name}", point_weight(members(forms, e)))
            products[e] = editor.emit(node, node.target, point, weights, bias if e == carrier else None)
        for axis, a_t in enumerate(f.a_t for f in forms):  # the output transform, one axis at a time
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


def _dilation_declined(weight_shape, out_shape, stride, dilation) -> str | None:
    """Why a dilated convolution is left alone, or None: the grid view takes a 1-D one (conv1d, or
    conv2d on [N, C, T, 1] with its taps along T) of stride 1 and static sizes."""
    lifted = len(out_shape) == 4 and out_shape[3] == 1 and weight_shape[3] == 1
    if not (lifted or len(out_shape) == 3) or list(dilation[1:]) not in ([], [1]):
        return "the grid view takes a 1-D kernel"
    if any(s != 1 for s in stride):
        return "with a stride"
    if not all(isinstance(n, int) for n in out_shape):
        return "a dynamic length (the grid would have a run-time number of rows)"
    if out_shape[2] <= dilation[0]:
        return f"{out_shape[2]} outputs: one per grid column, no tile of two"
    return None


def _dilation_as_grid(editor: ProgramEditor, plan: WinogradPlan) -> Node:
    """The lifted convolution [N, C, T, 1] dilated by d along T as an undilated one over its padded
    input viewed [N, C, R, d] (sample d*i + j at (i, j)), R - k + 1 = ceil(T_out / d) rounded up to
    whole tiles of two rows, so that the padding is all here; its output [N, O, R - k + 1, d]
    viewed back to [N, O, d * (R - k + 1), 1] and cut to T_out."""
    node, d, k, n = plan.node, plan.dilation[0], plan.kernel[0], plan.outputs[0]
    x, weight, bias = weighted_operands(node)
    batch, channels, _, _ = x.meta["val"].shape
    rows = _grid_rows(n, d) + k - 1
    padded = _padded_to(editor, node, x, plan.padding, [d * rows, 1])
    grid = editor.emit(node, aten.view.default, padded, [batch, channels, rows, d])
    undilated = editor.emit(node, aten.conv2d.default, grid, weight, bias)
    out_channels, out_rows = weight.meta["val"].shape[0], rows - k + 1
    out = editor.emit(node, aten.view.default, undilated, [batch, out_channels, d * out_rows, 1])
    if d * out_rows != n:
        out = editor.emit(node, aten.slice.Tensor, out, 2, 0, n)
    editor.replace([node], out)
    return undilated


def _grid_rows(n: int, d: int) -> int:
    """A dilation grid's output rows: ceil(n / d), rounded up to whole tiles of two."""
    return 2 * -(-n // (2 * d))


def _on_grid(plan: WinogradPlan) -> WinogradPlan:
    """The plan of the undilated convolution on a dilation's grid (padded already): [R, d] outputs."""
    d, rows = plan.dilation[0], _grid_rows(plan.outputs[0], plan.dilation[0])
    return replace(plan, kernel=(plan.kernel[0], 1), padding=(0, 0), outputs=(rows, d), stride=(1, 1), dilation=(1, 1))


def _transformed(plan: WinogradPlan) -> WinogradPlan:
    """The plan of the convolution the transforms read: on the dilation's grid, folded in time."""
    plan = _on_grid(plan) if any(d > 1 for d in plan.dilation) else plan
    return _folded(plan) if plan.fold > 1 else plan


def _folded(plan: WinogradPlan) -> WinogradPlan:
    """The plan of the convolution a fold in time makes: f phases in, f out, ceil((k + f - 1) / f) taps."""
    f, k, n = plan.fold, plan.kernel[0], plan.outputs[0]
    kernel, outputs = (*phase_taps([k + f - 1], [f]), *plan.kernel[1:]), (-(-n // f), *plan.outputs[1:])
    return WinogradPlan(plan.node, kernel, (0,) * len(kernel), outputs, plan.stride, plan.dilation)


def _time_on_channels(editor: ProgramEditor, plan: WinogradPlan) -> Node:
    """The convolution [N, C, T, W] with taps along T (lifted: W = 1) folded in time
    (`math.polyphase.folded_in_time_weight`):
    its input padded, or cut, to f * (Q + m - 1) for Q = ceil(T_out / f) outputs of m taps, space to
    depth, the stride-1 convolution 2C -> 2O, the interleave of its output phases, cut to T_out."""
    node, f, folded = plan.node, plan.fold, _folded(plan)
    bias = node.args[2] if len(node.args) > 2 else None
    width = node.args[0].meta["val"].shape[3] + 2 * plan.padding[1]  # 1, a dilation grid's columns, or a 2-D one's
    lengths = [f * (folded.outputs[0] + folded.kernel[0] - 1), width]
    fold_bias = None if bias is None else editor.derived_constant(bias, "in_time", lambda b: b.repeat(f))
    in_time = ("in_time", lambda w: folded_in_time_weight(w, [f, 1]))
    stride_1 = _over_input_phases(editor, plan, [f, 1], lengths, in_time, fold_bias)
    out = interleave(editor, node, stride_1, [f, 1], 1)
    if f * folded.outputs[0] != plan.outputs[0]:
        out = editor.emit(node, aten.slice.Tensor, out, 2, 0, plan.outputs[0])
    editor.replace([node], out)
    return stride_1


def _phases_on_channels(editor: ProgramEditor, plan: WinogradPlan) -> Node:
    """The strided convolution as a stride-1 one over its padded input's phases stacked on
    channels (`math.polyphase.strided_as_phases_weight`): the input padded, or cut, to
    s * (outputs + folded kernel - 1) per axis, then space to depth."""
    node, stride = plan.node, list(plan.stride)
    bias = node.args[2] if len(node.args) > 2 else None
    needed = [s * (n + k - 1) for s, n, k in zip(stride, plan.outputs, plan.kernel)]
    phases = ("phases", lambda w: strided_as_phases_weight(w, stride))
    stride_1 = _over_input_phases(editor, plan, stride, needed, phases, bias)
    editor.replace([node], stride_1)
    return stride_1


def _over_input_phases(editor: ProgramEditor, plan: WinogradPlan, phases: list[int], lengths, weight_of, bias) -> Node:
    """The stride-1 convolution over the planned one's input padded, or cut, to `lengths` and its
    `phases` stacked on channels (space to depth), with the weight `weight_of = (key, W -> W')`."""
    node = plan.node
    padded = _padded_to(editor, node, node.args[0], plan.padding, lengths)
    stacked = space_to_depth(editor, node, padded, phases)
    return editor.emit(node, node.target, stacked, editor.derived_constant(node.args[1], *weight_of), bias)


def _padded_to(editor: ProgramEditor, anchor: Node, x: Node, padding, lengths: list[int]) -> Node:
    """x zero-padded by `padding` before each spatial axis and after it up to `lengths`, or cut to
    them: the whole phases or rows a strided or gridded convolution reads, no sample past them."""
    sizes = x.meta["val"].shape[2:]
    padded = pad_spatial(editor, anchor, x, [(p, max(0, n - p - size)) for p, n, size in zip(padding, lengths, sizes)])
    for axis, n in enumerate(lengths):
        if padded.meta["val"].shape[2 + axis] != n:
            padded = editor.emit(anchor, aten.slice.Tensor, padded, 2 + axis, 0, n)
    return padded


def _steps(kernel: tuple[int, ...]) -> list[int]:
    return [tile_outputs(k) for k in kernel]


class _TransformedInputs:
    """Each distinct depthwise transform of the padded input computed once, and each reader's tiles
    sliced from it. A 1-D transform reads the input whole (its readers start whole tiles on); a 2-D
    one a window of the tiles from its offset within the first (its readers all start there)."""

    def __init__(self, editor: ProgramEditor, anchor: Node, padded: Node, steps: list[int], tiles: tuple, keys):
        self.editor, self.anchor, self.tiles = editor, anchor, tiles
        windows = _Windows(editor, anchor, padded, steps, tiles)
        channels = padded.meta["val"].shape[1]
        self.nodes, self.reads = {}, {}
        for index, key in enumerate(keys):
            taps, spacing, offsets = zip(*key)
            kernel = outer([torch.tensor(t, dtype=torch.float64) for t in taps]).float()
            kernel = kernel.expand(channels, 1, *kernel.shape).contiguous()  # one per channel: depthwise
            transform = editor.new_constant(kernel, f"{anchor.name}_in{index}")
            spans = [d * (len(t) - 1) + 1 for t, d in zip(taps, spacing)]
            window = windows.at(offsets, spans)
            conv = (anchor.target, window, transform, None, steps, [0] * len(steps), list(spacing), channels)
            self.nodes[key] = editor.emit(anchor, *conv)

    def read(self, key: tuple, shift: tuple) -> Node:
        if (key, shift) not in self.reads:
            node = self.nodes[key]
            for axis, (start, tiles) in enumerate(zip(shift, self.tiles)):
                length = node.meta["val"].shape[2 + axis]  # a dynamic one is whole tiles (checked)
                if isinstance(length, int) and (start, length) != (0, tiles):
                    node = self.editor.emit(self.anchor, aten.slice.Tensor, node, 2 + axis, start, start + tiles)
            self.reads[key, shift] = node
        return self.reads[key, shift]


class _Windows:
    """The padded input from an offset on per axis, cut where a kernel of the given span would
    make more than `tiles`; slices shared by the transforms that start at the same offsets
    (a sparse kernel skips the zero taps before its first, so it reads the input from there)."""

    def __init__(self, editor: ProgramEditor, anchor: Node, padded: Node, steps: list[int], tiles: tuple):
        self.editor, self.anchor, self.steps, self.tiles = editor, anchor, steps, tiles
        self.lengths = list(padded.meta["val"].shape[2:])
        self.cache: dict[tuple, Node] = {(): padded}

    def at(self, offsets: tuple[int, ...], spans: list[int]) -> Node:
        if not any(offsets) or not all(isinstance(n, int) for n in self.lengths):  # all of it, no slice
            return self.cache[()]
        key: tuple = ()
        for axis, (offset, span, step, count) in enumerate(zip(offsets, spans, self.steps, self.tiles)):
            end = min(offset + step * count + span - 1, self.lengths[axis])
            parent, key = self.cache[key], (*key, (offset, end))
            if key not in self.cache:
                whole = offset == 0 and end == self.lengths[axis]
                slice_ = (aten.slice.Tensor, parent, 2 + axis, offset, end)
                self.cache[key] = parent if whole else self.editor.emit(self.anchor, *slice_)
        return self.cache[key]


def _signed_sum(editor: ProgramEditor, anchor: Node, terms: list[tuple[Node, torch.Tensor]]) -> Node:
    """sum of sign * term for signs in {-1, 0, 1}, as adds and subs (a positive term first)."""
    kept = sorted(((n, float(s)) for n, s in terms if s != 0), key=lambda term: term[1] < 0)
    assert all(abs(s) == 1 for _, s in kept) and kept[0][1] > 0, [s for _, s in kept]
    total = kept[0][0]
    for term, sign in kept[1:]:
        total = editor.emit(anchor, aten.add.Tensor if sign > 0 else aten.sub.Tensor, total, term)
    return total
