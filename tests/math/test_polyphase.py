"""The polyphase identity on plain tensors, in float64, against PyTorch's transposed convolutions."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseconv.math.polyphase import (
    conv_transpose_as_polyphase,
    folded_in_time_weight,
    interleave_phases,
    interleave_steps,
    nearest_conv_weight,
    output_length,
    phase_bias,
    phase_reads,
    phase_slice,
    phase_weight,
    phase_window,
    space_to_depth,
    strided_as_phases_weight,
)

CONV_TRANSPOSE = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def reference_and_polyphase(x, w, b, stride, padding, output_padding, groups, dilation):
    spatial = x.dim() - 2
    expected = CONV_TRANSPOSE[spatial](x, w, b, stride, padding, output_padding, groups, dilation)
    actual = conv_transpose_as_polyphase(x, w, b, stride, padding, output_padding, groups, dilation)
    return expected, actual


def test_phase_weight_matches_the_formula():
    """W'[j*C_out + c, c_in, u] = w[c_in, c, s*(m - 1 - u) + j], with taps past k zero."""
    w = torch.randn(3, 2, 5, dtype=torch.float64)
    s, m = 2, 3
    phases = phase_weight(w, [s], [1], 1)
    assert phases.shape == (s * 2, 3, m)
    for j in range(s):
        for c in range(2):
            for u in range(m):
                tap = s * (m - 1 - u) + j
                expected = w[:, c, tap] if tap < 5 else torch.zeros(3, dtype=torch.float64)
                torch.testing.assert_close(phases[j * 2 + c, :, u], expected, rtol=0, atol=0)


def test_phase_bias_repeats_per_phase_within_each_group():
    bias = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert phase_bias(bias, [2], 2).tolist() == [1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]


def test_interleave_is_depth_to_space():
    """Phase-major channels (j1, j2, c) land at output (c, s1*q1 + j1, s2*q2 + j2)."""
    n, c, s1, s2, q1, q2 = 2, 3, 2, 3, 4, 5
    phases = torch.randn(n, s1 * s2 * c, q1, q2)
    out = interleave_phases(phases, [s1, s2], 1)
    for j1 in range(s1):
        for j2 in range(s2):
            block = phases[:, (j1 * s2 + j2) * c : (j1 * s2 + j2 + 1) * c]
            torch.testing.assert_close(out[:, :, j1::s1, j2::s2], block, rtol=0, atol=0)


def test_3d_interleave_is_split_into_permutes_of_at_most_six_dimensions():
    steps = interleave_steps(1, [2, 2, 2], 4, [3, 3, 3])
    assert len(steps) == 3 and all(len(step.permutation) <= 6 for step in steps)
    steps_2d = interleave_steps(1, [2, 2], 4, [3, 3])
    assert len(steps_2d) == 1 and len(steps_2d[0].permutation) == 6


def test_window_folds_whole_blocks_of_padding_into_conv_padding():
    """k16 s8 p4 (DAC-like): m = 2, the crop of 4 < s stays; a whole block of padding is not computed."""
    window = phase_window(25, 8, 4, 1, 16, 0)
    assert (window.taps, window.pad_before, window.pad_after, window.crop_start) == (2, 1, 1, 4)
    window = phase_window(25, 8, 8, 1, 16, 0)
    assert (window.pad_before, window.pad_after, window.crop_start, window.blocks) == (0, 0, 0, 24)


def test_window_of_a_causal_trim_needs_no_crop():
    """Mimi: ConvTranspose1d(k=2s, s) then [..., :-s] is exactly blocks 0..L-1."""
    window = phase_window(25, 6, 0, 1, 12, 0, 0, 25 * 6)
    assert (window.pad_before, window.pad_after, window.blocks) == (1, 0, 25)
    assert not window.needs_crop and not window.needs_input_slice


def test_window_slices_inputs_that_only_feed_cropped_blocks():
    """k4 s2 p6 on 6 samples: the 2 outputs are block 3 (full positions 6, 7), read from x[2..3]."""
    window = phase_window(6, 2, 6, 1, 4, 0)
    assert (window.input_start, window.input_stop, window.pad_before, window.pad_after) == (2, 4, 0, 0)
    assert (window.blocks, window.crop_start, window.crop_stop) == (1, 0, 2)


GRID_1D = [
    (s, k, p, op, d)
    for s in (1, 2, 3, 5, 8)
    for k in (1, 2, 3, 7, 16)
    for p in (0, 1, 4, 9)
    for op in (0, 1, 4)
    for d in (1, 2)
    if op < max(s, d) and output_length(3, s, p, d, k, op) >= 1
]


@pytest.mark.parametrize(("stride", "kernel", "padding", "output_padding", "dilation"), GRID_1D)
def test_1d_grid(stride, kernel, padding, output_padding, dilation):
    x = torch.randn(2, 3, 3, dtype=torch.float64)
    w = torch.randn(3, 4, kernel, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float64)
    expected, actual = reference_and_polyphase(x, w, b, [stride], [padding], [output_padding], 1, [dilation])
    torch.testing.assert_close(actual, expected)


@settings(max_examples=150, deadline=None)
@given(
    spatial=st.integers(1, 3),
    groups=st.integers(1, 3),
    data=st.data(),
)
def test_property_every_case(spatial, groups, data):
    """Random dims, groups, kernels, strides, paddings, output paddings, dilations, lengths."""
    draw = data.draw
    stride = [draw(st.integers(1, 4)) for _ in range(spatial)]
    kernel = [draw(st.integers(1, 6)) for _ in range(spatial)]
    dilation = [draw(st.integers(1, 3)) for _ in range(spatial)]
    padding = [draw(st.integers(0, 5)) for _ in range(spatial)]
    output_padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
    length = [draw(st.integers(1, 4)) for _ in range(spatial)]
    c_in, c_out = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    out = [output_length(*args) for args in zip(length, stride, padding, dilation, kernel, output_padding)]
    if min(out) < 1:
        return
    x = torch.randn(2, c_in, *length, dtype=torch.float64)
    w = torch.randn(c_in, c_out // groups, *kernel, dtype=torch.float64)
    b = torch.randn(c_out, dtype=torch.float64) if draw(st.booleans()) else None
    expected, actual = reference_and_polyphase(x, w, b, stride, padding, output_padding, groups, dilation)
    torch.testing.assert_close(actual, expected)
    assert math.prod(actual.shape) == math.prod(expected.shape)


def samples(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """x[..., start:stop] of a 1-D signal with zeros outside it."""
    length = x.shape[-1]
    inside = x[..., max(start, 0) : min(stop, length)]
    return F.pad(inside, [max(0, -start), max(0, stop - length)])


@settings(max_examples=150, deadline=None)
@given(
    stride=st.integers(2, 5),
    kernel=st.integers(1, 9),
    padding=st.integers(0, 6),
    dilation=st.integers(1, 2),
    length=st.integers(1, 6),
    data=st.data(),
)
def test_property_each_phase_read_on_its_own_needs_no_crop(stride, kernel, padding, dilation, length, data):
    """Output phase j from its own convolution over samples [start_j, stop_j) with phase weight f_j:
    interleaved, these are the deconvolution's output (a trimmed window too), with no crop."""
    output_padding = data.draw(st.integers(0, max(stride, dilation) - 1))
    full = output_length(length, stride, padding, dilation, kernel, output_padding)
    if full < 1:
        return
    start = data.draw(st.integers(0, full - 1))
    stop = data.draw(st.integers(start + 1, full))
    reads = phase_reads(phase_window(length, stride, padding, dilation, kernel, output_padding, start, stop))
    if reads is None:
        assert (stop - start) % stride
        return
    x = torch.randn(2, 3, length, dtype=torch.float64)
    w = torch.randn(3, 1, kernel, dtype=torch.float64)
    phases = phase_weight(w, [stride], [dilation], 3)
    convs = [F.conv1d(samples(x, r.start, r.stop), phase_slice(phases, [stride], 3, r.phase), groups=3) for r in reads]
    actual = interleave_phases(torch.cat(convs, 1), [stride], 1)
    expected = F.conv_transpose1d(x, w, None, stride, padding, output_padding, 3, dilation)[..., start:stop]
    torch.testing.assert_close(actual, expected)


def correlation_case(kernel, lengths, needed, seed):
    """(x [2, 3, lengths...], x zero-padded after each axis to `needed`, W [4, 3, kernel...], the
    conv of that many axes), in float64."""
    generator = torch.Generator().manual_seed(sum(kernel) * 31 + seed)
    x = torch.randn(2, 3, *lengths, dtype=torch.float64, generator=generator)
    w = torch.randn(4, 3, *kernel, dtype=torch.float64, generator=generator)
    pads = [p for size, n in reversed(list(zip(lengths, needed))) for p in (0, n - size)]
    return x, F.pad(x, pads), w, F.conv1d if len(kernel) == 1 else F.conv2d


@settings(max_examples=40, deadline=None)
@given(
    kernel=st.lists(st.integers(1, 5), min_size=1, max_size=2),
    stride=st.lists(st.integers(1, 3), min_size=2, max_size=2),
    outputs=st.lists(st.integers(1, 5), min_size=2, max_size=2),
)
def test_a_strided_correlation_is_a_stride_1_one_over_the_input_phases(kernel, stride, outputs):
    """y = conv(xp, W, stride s) = conv(space_to_depth(xp'), W'), xp' padded or cut to
    s * (outputs + ceil(k / s) - 1), in float64."""
    axes = len(kernel)
    stride, outputs = stride[:axes], outputs[:axes]
    lengths = [s * (n - 1) + k for s, n, k in zip(stride, outputs, kernel)]  # exactly `outputs` outputs
    needed = [s * (n + -(-k // s) - 1) for s, n, k in zip(stride, outputs, kernel)]
    x, padded, w, conv = correlation_case(kernel, lengths, needed, sum(stride) * 7 + sum(outputs))
    folded = conv(space_to_depth(padded, stride), strided_as_phases_weight(w, stride))
    torch.testing.assert_close(folded, conv(x, w, stride=stride), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    kernel=st.lists(st.integers(1, 11), min_size=1, max_size=2),
    fold=st.lists(st.integers(1, 3), min_size=2, max_size=2),
    outputs=st.lists(st.integers(1, 5), min_size=2, max_size=2),
)
def test_a_stride_1_correlation_folded_in_time_maps_input_phases_to_output_phases(kernel, fold, outputs):
    """conv(xp, W) = interleave(conv(space_to_depth(xp'), W')), with f * n outputs and xp' padded to
    f * (n + ceil((k + f - 1) / f) - 1), in float64."""
    axes = len(kernel)
    fold, outputs = fold[:axes], outputs[:axes]
    lengths = [f * n + k - 1 for f, n, k in zip(fold, outputs, kernel)]  # exactly f * n outputs
    needed = [f * (n + -(-(k + f - 1) // f) - 1) for f, n, k in zip(fold, outputs, kernel)]
    x, padded, w, conv = correlation_case(kernel, lengths, needed, sum(fold) * 7 + sum(outputs))
    phases = conv(space_to_depth(padded, fold), folded_in_time_weight(w, fold))
    torch.testing.assert_close(interleave_phases(phases, fold, 1), conv(x, w), rtol=1e-12, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(spatial=st.integers(1, 3), groups=st.integers(1, 3), data=st.data())
def test_property_a_convolution_of_a_nearest_upsample_is_a_transposed_convolution(spatial, groups, data):
    """conv(nearest(x, r), w, padding p) == conv_transpose(x, G, stride r, padding k - 1 - p)."""
    draw = data.draw
    factors = [draw(st.integers(1, 4)) for _ in range(spatial)]
    kernel = [draw(st.integers(1, 5)) for _ in range(spatial)]
    padding = [draw(st.integers(0, k - 1)) for k in kernel]
    length = [draw(st.integers(1, 4)) for _ in range(spatial)]
    if any(n * r + 2 * p < k for n, r, p, k in zip(length, factors, padding, kernel)):
        return
    c_in, c_out = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    x = torch.randn(2, c_in, *length, dtype=torch.float64)
    w = torch.randn(c_out, c_in // groups, *kernel, dtype=torch.float64)
    b = torch.randn(c_out, dtype=torch.float64) if draw(st.booleans()) else None
    upsampled = F.interpolate(x, scale_factor=factors, mode="nearest")
    expected = CONV[spatial](upsampled, w, b, padding=padding, groups=groups)
    weight = nearest_conv_weight(w, factors, groups)
    assert list(weight.shape[2:]) == [k + r - 1 for k, r in zip(kernel, factors)]
    transposed_padding = [k - 1 - p for k, p in zip(kernel, padding)]
    actual = CONV_TRANSPOSE[spatial](x, weight, b, factors, transposed_padding, groups=groups)
    torch.testing.assert_close(actual, expected)
