"""The polyphase identity for transposed convolutions, as plain tensor functions.

Per spatial dimension (stride s, padding p, dilation d, kernel k, output padding op, input length L):

    L_out = (L - 1)*s - 2p + d*(k - 1) + op + 1
    z[t]  = sum over (i, kappa) with i*s + kappa*d == t of x[i] * w[kappa]      (the "full" output)
    y[t]  = z[t + p]

With the kernel dilated (k_eff = d*(k - 1) + 1 taps) and zero-padded to m*s taps, m = ceil(k_eff / s):

    z[s*q + j] = sum_{u < m} x[q + u - (m - 1)] * w[s*(m - 1 - u) + j]

so a stride-1 correlation with s*C_out output channels computes every phase j at once.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PhaseWindow:
    """How one spatial dimension of a transposed convolution maps onto the polyphase convolution.

    The stride-1 convolution reads input samples `[input_start, input_stop)`, zero-padded by
    `pad_before` and `pad_after`, and yields `blocks` phase blocks of `stride` outputs; after the
    interleave, outputs `[crop_start, crop_stop)` are the requested window of the deconvolution.
    """

    stride: int
    taps: int
    input_start: int
    input_stop: int
    input_length: int
    pad_before: int
    pad_after: int
    blocks: int
    crop_start: int
    crop_stop: int

    @property
    def interleaved_length(self) -> int:
        return self.stride * self.blocks

    def offsets(self) -> tuple[int, ...]:
        """Everything but the lengths: equal for two lengths when one window plan serves both."""
        return (
            self.taps,
            self.input_start,
            self.input_stop - self.input_length,
            self.pad_before,
            self.pad_after,
            self.crop_start,
            self.crop_stop - self.interleaved_length,
        )

    @property
    def needs_input_slice(self) -> bool:
        return self.input_start != 0 or self.input_stop != self.input_length

    @property
    def needs_crop(self) -> bool:
        return self.crop_start != 0 or self.crop_stop != self.interleaved_length


def output_length(length: int, stride: int, padding: int, dilation: int, kernel: int, output_padding: int) -> int:
    """L_out = (L - 1)*s - 2p + d*(k - 1) + op + 1."""
    return (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def phase_window(
    length: int,
    stride: int,
    padding: int,
    dilation: int,
    kernel: int,
    output_padding: int,
    start: int = 0,
    stop: int | None = None,
) -> PhaseWindow:
    """Plan one dimension so that exactly outputs `[start, stop)` of the deconvolution are computed.

    The window covers full-output positions `[p + start, p + stop)`: phase blocks
    `qa = (p + start) // s` to `qb = (p + stop - 1) // s`. Block q reads inputs
    `x[q - (m - 1) .. q]`, so the convolution reads `[qa - m + 1, qb]`: what lies outside `[0, L)`
    is zero padding (past the end, that is where output_padding > padding gives bias alone), what
    lies inside but is not read is sliced off the input. Only the partial blocks at the two ends of
    the window are cropped after the interleave: whole blocks of padding or trim cost nothing.
    """
    full = output_length(length, stride, padding, dilation, kernel, output_padding)
    stop = full if stop is None else stop
    if not 0 <= start < stop <= full:
        raise ValueError(f"window [{start}, {stop}) is not inside the output of length {full}")
    taps = math.ceil((dilation * (kernel - 1) + 1) / stride)
    first_block = (padding + start) // stride
    last_block = (padding + stop - 1) // stride
    crop_start = padding + start - stride * first_block
    return PhaseWindow(
        stride=stride,
        taps=taps,
        input_start=max(0, first_block - taps + 1),
        input_stop=min(length, last_block + 1),
        input_length=length,
        pad_before=max(0, taps - 1 - first_block),
        pad_after=max(0, last_block + 1 - length),
        blocks=last_block - first_block + 1,
        crop_start=crop_start,
        crop_stop=crop_start + stop - start,
    )


def mac_overhead(windows: list[PhaseWindow], kernel: list[int]) -> float:
    """The polyphase convolution's multiply-adds over the deconvolution's: prod(B*m*s) / prod(L*k)."""
    return math.prod(w.blocks * w.taps * w.stride for w in windows) / math.prod(
        w.input_length * k for w, k in zip(windows, kernel)
    )


@dataclass(frozen=True)
class PhaseRead:
    """What output phase j of a window reads when it is computed by a convolution of its own:
    phase weight `phase`, over input samples `[start, stop)` (outside `[0, L)`: zero padding)."""

    phase: int
    start: int
    stop: int


def phase_reads(window: PhaseWindow) -> list[PhaseRead] | None:
    """One PhaseRead per output phase j, so that the window needs no crop; None when its output is
    not a whole number B of blocks (the phases would differ in length).

    With crop_start + j = s*o_j + f_j, output y[s*q + j] = z[s*(q + o_j) + f_j]: phase weight f_j at
    convolution block q + o_j. Block b reads the padded input from position b, which is input sample
    b + input_start - pad_before, so phase j reads samples start_j = input_start - pad_before + o_j
    up to start_j + B + m - 1.
    """
    length = window.crop_stop - window.crop_start
    if length % window.stride:
        return None
    blocks = length // window.stride
    reads = []
    for j in range(window.stride):
        offset, phase = divmod(window.crop_start + j, window.stride)
        start = window.input_start - window.pad_before + offset
        reads.append(PhaseRead(phase, start, start + blocks + window.taps - 1))
    return reads


# Past this length no clamp of a window changes any more: its offsets are those of every longer length.
LONG = 1 << 20


def phase_window_any_length(
    shortest: int, typical: int, stride: int, padding: int, dilation: int, kernel: int, output_padding: int
) -> PhaseWindow | None:
    """The whole output of a dimension whose length L >= `shortest` is known only at run time.

    Input stop, padding and crop are affine in L with clamps at fixed points, so when the window
    has the same offsets (`PhaseWindow.offsets`) at `shortest` and at a very long length, one plan
    serves every length in between. None when it does not (an input too short for the kernel at the
    shortest length). Planned at `typical` (for its cost).
    """
    settings = (stride, padding, dilation, kernel, output_padding)
    if phase_window(shortest, *settings).offsets() != phase_window(shortest + LONG, *settings).offsets():
        return None
    return phase_window(typical, *settings)


@dataclass(frozen=True)
class AlignedPhases:
    """A 1-D transposed convolution's whole output as phase blocks that start at output 0, for a
    length known only at run time (XNNPACK slices static shapes only: no crop may follow).

    With c = p mod s, output y[s*q + j] = z[s*(q + a_j) + b_j] where j + p = s*a_j + b_j: phases
    j < s - c read phase b = j + c of block q + p//s, the others phase j + c - s of the next block. So
    two stride-1 convolutions: phases c..s-1 over the input zero-padded by (`pad_before`,
    `pad_after`), phases 0..c-1 over it padded by one less before and one more after; their
    concatenation is phase-major from j = 0, and the output is L + `extra_blocks` whole blocks.
    """

    stride: int
    taps: int
    shift: int  # c: the first `stride - shift` output phases come from the phase weights shift..s-1
    pad_before: int
    pad_after: int
    extra_blocks: int


def aligned_phases(
    shortest: int,
    stride: int,
    padding: int,
    dilation: int,
    kernel: int,
    output_padding: int,
    trim_start: int = 0,
    trim_end: int = 0,
) -> AlignedPhases | None:
    """The AlignedPhases of a dimension with lengths L >= `shortest` whose output also loses
    `trim_start` and `trim_end` samples (a slice after the layer: padding p + trim_start on the left),
    or None when the output length is not a whole number of blocks (a crop would remain) or a
    padding would be negative."""
    taps = math.ceil((dilation * (kernel - 1) + 1) / stride)
    rest = output_length(0, stride, padding, dilation, kernel, output_padding) - trim_start - trim_end  # - L*s
    padding += trim_start
    if rest % stride:
        return None
    extra_blocks = rest // stride
    pad_before = taps - 1 - padding // stride
    shift = padding % stride
    pad_after = extra_blocks + padding // stride
    if pad_before - (shift > 0) < 0 or pad_after < 0 or shortest + extra_blocks < 1:
        return None
    return AlignedPhases(stride, taps, shift, pad_before, pad_after, extra_blocks)


def dilate_kernel(weight: torch.Tensor, dilation: list[int]) -> torch.Tensor:
    """Insert d - 1 zeros between the taps of every spatial dimension: k taps -> d*(k - 1) + 1."""
    for dim, d in enumerate(dilation, start=2):
        if d == 1:
            continue
        k = weight.shape[dim]
        shape = list(weight.shape)
        shape[dim] = d * (k - 1) + 1
        dilated = weight.new_zeros(shape)
        index = torch.arange(k, device=weight.device) * d
        weight = dilated.index_copy(dim, index, weight)
    return weight


def phase_weight(weight: torch.Tensor, stride: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    """Transposed-convolution weight [C_in, C_out/g, k...] -> stride-1 convolution weight.

    W'[(grp, j..., c), c_in, u...] = w[grp*C_in/g + c_in, c, s*(m - 1 - u) + j] per dimension:
    output channels are ordered group-major, then phase-major (j_1, ..., j_D), then channel.
    Result shape [g * prod(s) * C_out/g, C_in/g, m_1, ..., m_D].
    """
    weight = dilate_kernel(weight, dilation)
    c_in, c_out_g = weight.shape[:2]
    spatial = len(stride)
    taps = [math.ceil(k / s) for k, s in zip(weight.shape[2:], stride)]
    padding = []
    for m, s, k in reversed(list(zip(taps, stride, weight.shape[2:]))):
        padding += [0, m * s - k]
    weight = F.pad(weight, padding)
    # [g, C_in/g, C_out/g, m_1, s_1, ..., m_D, s_D]
    split = [groups, c_in // groups, c_out_g]
    for m, s in zip(taps, stride):
        split += [m, s]
    weight = weight.reshape(split).flip([3 + 2 * i for i in range(spatial)])
    phases = [4 + 2 * i for i in range(spatial)]
    tap_dims = [3 + 2 * i for i in range(spatial)]
    weight = weight.permute([0, *phases, 2, 1, *tap_dims])
    return weight.reshape(groups * math.prod(stride) * c_out_g, c_in // groups, *taps).contiguous()


def nearest_conv_weight(weight: torch.Tensor, factors: list[int], groups: int) -> torch.Tensor:
    """Convolution weight [C_out, C_in/g, k...] after a nearest upsample by r -> the transposed
    convolution weight [C_in, C_out/g, (k + r - 1)...] of stride r and padding k - 1 - p that
    computes the same output:

        conv(nearest(x, r), w, padding p) = conv_transpose(x, G, stride r, padding k - 1 - p)
        G[j] = sum_u flip(w)[u] [0 <= j - u < r]      per spatial dimension (flip(w) * box of r ones)
    """
    spatial = len(factors)
    weight = weight.flip(list(range(2, 2 + spatial)))
    for dim, r in enumerate(factors, start=2):
        after = [0, 0] * (weight.dim() - 1 - dim)
        weight = sum(F.pad(weight, [*after, shift, r - 1 - shift]) for shift in range(r))
    c_out, c_in_g = weight.shape[:2]
    weight = weight.reshape(groups, c_out // groups, c_in_g, *weight.shape[2:]).transpose(1, 2)
    return weight.reshape(groups * c_in_g, c_out // groups, *weight.shape[3:]).contiguous()


def phase_slice(phases: torch.Tensor, stride: list[int], groups: int, phase: int) -> torch.Tensor:
    """Output channels of phase `phase` (row-major over (j_1..j_D)) of a phase weight, every group.

    [g * prod(s) * C_out/g, C_in/g, m...] -> [C_out, C_in/g, m...]: one stride-1 convolution per
    phase, for the depthwise case where XNNPACK's depthwise kernels beat one multiplier-s^D conv.
    """
    per_group = phases.reshape(groups, math.prod(stride), -1, *phases.shape[1:])
    return per_group[:, phase].reshape(-1, *phases.shape[1:]).contiguous()


def phase_bias(bias: torch.Tensor, stride: list[int], groups: int) -> torch.Tensor:
    """Bias [C_out] -> [g * prod(s) * C_out/g]: each group's biases repeated once per phase."""
    per_group = bias.reshape(groups, 1, -1)
    return per_group.expand(groups, math.prod(stride), per_group.shape[-1]).reshape(-1).contiguous()


def phase_channel_values(values: torch.Tensor, groups: int, phases: int) -> torch.Tensor:
    """A per-channel quantity of a transposed weight's axis 1 (C_out/g entries, one set shared by
    every group: int8 scales and zero points) -> one entry per output channel (grp, j, c) of a
    weight holding `phases` phases: values[c], repeated for every group and phase."""
    return values.repeat(groups * phases).contiguous()


@dataclass(frozen=True)
class InterleaveStep:
    """view(view_shape) -> permute(permutation); the last step is followed by view(out_shape)."""

    view_shape: tuple[int, ...]
    permutation: tuple[int, ...]


MAX_PERMUTE_RANK = 6  # XNNPACK's transpose operator takes at most 6 dimensions.


def interleave_steps(lead: int, stride: list[int], channels: int, blocks: list[int]) -> list[InterleaveStep]:
    """Depth-to-space of [lead, s_1..s_D, C, Q_1..Q_D] into [lead, C, Q_1*s_1, ..., Q_D*s_D].

    `lead` is batch * groups (they stay adjacent and in order); -1 stands for a dynamic batch.
    One permute when its rank fits XNNPACK's transpose, otherwise one 5-D permute per dimension:
    [lead, s_i, R, Q_i, T] -> [lead, R, Q_i, s_i, T].
    """
    spatial = len(stride)
    if 2 * spatial + 2 <= MAX_PERMUTE_RANK:
        view = (lead, *stride, channels, *blocks)
        perm = [0, spatial + 1]
        for i in range(spatial):
            perm += [spatial + 2 + i, 1 + i]
        return [InterleaveStep(view, tuple(perm))]
    steps = []
    for i, (s, q) in enumerate(zip(stride, blocks)):
        between = math.prod(stride[i + 1 :]) * channels * math.prod(q * s for q, s in zip(blocks[:i], stride[:i]))
        after = math.prod(blocks[i + 1 :])
        steps.append(InterleaveStep((lead, s, between, q, after), (0, 2, 3, 1, 4)))
    return steps


def interleave_phases(phases: torch.Tensor, stride: list[int], groups: int) -> torch.Tensor:
    """[N, g*prod(s)*C/g, Q...] phase-major per group -> [N, C, Q_1*s_1, ...] (reference form)."""
    n, c_total, *blocks = phases.shape
    channels = c_total // (groups * math.prod(stride))
    for step in interleave_steps(n * groups, stride, channels, blocks):
        phases = phases.reshape(step.view_shape).permute(step.permutation)
    return phases.reshape(n, groups * channels, *(q * s for q, s in zip(blocks, stride)))


def conv_transpose_as_polyphase(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    output_padding: list[int],
    groups: int,
    dilation: list[int],
) -> torch.Tensor:
    """Reference: F.conv_transposeNd computed as one stride-1 convolution + interleave + crop."""
    windows = [
        phase_window(length, *dim)
        for length, dim in zip(x.shape[2:], zip(stride, padding, dilation, weight.shape[2:], output_padding))
    ]
    for dim, w in enumerate(windows, start=2):
        x = x.narrow(dim, w.input_start, w.input_stop - w.input_start)
    x = F.pad(x, [pad for w in reversed(windows) for pad in (w.pad_before, w.pad_after)])
    conv = (F.conv1d, F.conv2d, F.conv3d)[len(stride) - 1]
    phases = conv(
        x,
        phase_weight(weight, stride, dilation, groups),
        None if bias is None else phase_bias(bias, stride, groups),
        groups=groups,
    )
    y = interleave_phases(phases, stride, groups)
    for dim, w in enumerate(windows, start=2):
        y = y.narrow(dim, w.crop_start, w.crop_stop - w.crop_start)
    return y


def phase_taps(kernel, stride) -> tuple[int, ...]:
    """ceil(k/s) per spatial axis: the taps of a stride-s correlation over its input's phases."""
    return tuple(-(-k // s) for k, s in zip(kernel, stride))


def strided_as_phases_weight(weight: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """W [O, C, k...] of a stride-s correlation -> W' [O, prod(s)*C, ceil(k/s)...] of the stride-1
    correlation over the input's phases stacked on channels (space to depth, phase-major):

        y[i] = sum_u W[u] xp[s*i + u] = sum_{a < s, v} W[s*v + a] xs_a[i + v],   xs_a[q] = xp[s*q + a]

    so W'[o, (a, c), v] = W[o, c, s*v + a], zero where s*v + a >= k (per spatial axis)."""
    kernel = weight.shape[2:]
    pads = [p for k, m, s in reversed(list(zip(kernel, phase_taps(kernel, stride), stride))) for p in (0, m * s - k)]
    return space_to_depth(F.pad(weight, pads), stride)  # the weight's own taps, split into phases


def folded_in_time_weight(weight: torch.Tensor, fold: list[int]) -> torch.Tensor:
    """W [O, C, k...] of a stride-1 correlation -> W' [prod(f)*O, prod(f)*C, ceil((k + f - 1) / f)...]
    of the stride-1 correlation from its input's f phases to its output's (both on channels,
    phase-major): output phase b is the stride-f correlation with W delayed by b,

        y[f*i + b] = sum_u W[u] xp[f*i + b + u]    so    W'[(b, o), (a, c), v] = W[o, c, f*v + a - b]

    zero where f*v + a - b is not a tap (per spatial axis)."""
    phases = []
    for delay in itertools.product(*[range(f) for f in fold]):
        pads = [p for b, f in reversed(list(zip(delay, fold))) for p in (b, f - 1 - b)]
        phases.append(strided_as_phases_weight(F.pad(weight, pads), fold))
    return torch.cat(phases)


def space_to_depth_steps(shape: list[int], stride: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(view, permutation, view) taking x [N, C, s*Q...] to [N, prod(s)*C, Q...], phase-major:
    channel (a, c) at q holds x[c, s*q + a]. In NHWC the permutation moves rows of s*C values."""
    batch, channels, *lengths = shape
    split = [batch, channels] + [n for length, s in zip(lengths, stride) for n in (length // s, s)]
    axes = len(lengths)
    order = [0, *[3 + 2 * i for i in range(axes)], 1, *[2 + 2 * i for i in range(axes)]]
    return split, order, [batch, math.prod(stride) * channels, *[n // s for n, s in zip(lengths, stride)]]


def space_to_depth(x: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """x [N, C, s*Q...] -> [N, prod(s)*C, Q...] (space_to_depth_steps)."""
    split, order, shape = space_to_depth_steps(list(x.shape), stride)
    return x.reshape(split).permute(order).reshape(shape)
