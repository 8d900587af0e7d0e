"""What a chain of reshapes and permutes does to a buffer, recovered as one transpose."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseconv.math.transposes import FlatTranspose, as_flat_transpose, physical_offsets


def moved(transpose: FlatTranspose, buffer: torch.Tensor) -> torch.Tensor:
    return buffer.reshape(transpose.dims).permute(transpose.perm).reshape(-1)


@st.composite
def transposes(draw):
    dims = draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
    perm = draw(st.permutations(range(len(dims))))
    return dims, perm


@settings(max_examples=200, deadline=None)
@given(transposes())
def test_every_transpose_is_recovered_exactly(case):
    dims, perm = case
    order = torch.arange(math.prod(dims)).reshape(dims).permute(perm).reshape(-1)
    found = as_flat_transpose(order)
    assert found is not None
    assert torch.equal(moved(found, torch.arange(order.numel())), order)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 60), st.randoms(use_true_random=False))
def test_what_is_recovered_is_exact_or_nothing(count, random):
    """A shuffled order: either no transpose, or one that moves exactly as the order says."""
    values = list(range(count))
    random.shuffle(values)
    order = torch.tensor(values)
    found = as_flat_transpose(order)
    assert found is None or torch.equal(moved(found, torch.arange(count)), order)


def test_a_reshape_is_no_move_and_axes_that_stay_adjacent_merge():
    found = as_flat_transpose(torch.arange(24).reshape(2, 3, 4).reshape(-1))
    assert found == FlatTranspose((24,), (0,)) and not found.moves
    found = as_flat_transpose(torch.arange(60).reshape(2, 3, 10).permute(1, 0, 2).reshape(-1))
    assert found == FlatTranspose((2, 3, 10), (1, 0, 2)) and found.moves


def test_the_1d_interleave_moves_nothing_in_channels_last():
    """[N, s*C, Q, 1] phase-major in NHWC -> [N, C, Q*s, 1] in NHWC: the same offsets."""
    n, s, c, q = 2, 4, 3, 5
    source = physical_offsets([n, s * c, q, 1], channels_last=True)
    interleaved = source.reshape(n, s, c, q).permute(0, 2, 3, 1).reshape(n, c, q * s, 1)
    found = as_flat_transpose(interleaved.permute(0, 2, 3, 1))
    assert found is not None and not found.moves
    # in NCHW it is a real transpose
    assert as_flat_transpose(interleaved.reshape(n, c, q * s)).moves


def test_the_2d_interleave_moves_rows_once_in_channels_last():
    """[N, s*s*C, H, W] -> [N, C, H*s, W*s]: one swap of the W and row-phase axes."""
    s, c, h, w = 2, 3, 4, 5
    source = physical_offsets([1, s * s * c, h, w], channels_last=True)
    interleaved = source.reshape(1, s, s, c, h, w).permute(0, 3, 4, 1, 5, 2).reshape(1, c, h * s, w * s)
    found = as_flat_transpose(interleaved.permute(0, 2, 3, 1))
    assert found == FlatTranspose((h, w, s, s * c), (0, 2, 1, 3))


def test_physical_offsets_of_a_channels_last_tensor():
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    offsets = physical_offsets(list(x.shape), channels_last=True)
    flat = x.as_strided((x.numel(),), (1,))
    assert torch.equal(flat[offsets], x)
