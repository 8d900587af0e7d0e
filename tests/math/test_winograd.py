"""Winograd's F(2, r) on plain tensors: the transforms, and the correlation they compute."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseconv.math.winograd import axis_form, correlate, row_support, transforms


def test_f23_is_the_known_algorithm():
    """Points 0, 1, -1 and infinity: integer input and output transforms, halves in G."""
    b_t, g, a_t = transforms(3)
    assert b_t.tolist() == [[-1, 0, 1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]]
    assert g.tolist() == [[-1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]
    assert a_t.tolist() == [[1, 1, 1, 0], [0, 1, -1, 1]]


@settings(max_examples=60, deadline=None)
@given(
    taps=st.integers(2, 11),
    channels=st.integers(1, 4),
    out_channels=st.integers(1, 4),
    length=st.integers(0, 9),
    batch=st.integers(1, 2),
)
def test_correlate_equals_the_direct_correlation(taps, channels, out_channels, length, batch):
    """Any length (an odd number of outputs: the last tile's second output is cut) in float64."""
    generator = torch.Generator().manual_seed(taps * 100 + length)
    x = torch.randn(batch, channels, length + taps, dtype=torch.float64, generator=generator)
    w = torch.randn(out_channels, channels, taps, dtype=torch.float64, generator=generator)
    b = torch.randn(out_channels, dtype=torch.float64, generator=generator)
    torch.testing.assert_close(correlate(x, w, b), F.conv1d(x, w, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("taps", [3, 7, 11])
def test_float32_rounding_is_that_of_a_direct_sum(taps, seed):
    """F(2, 3) and the chunked forms round like the direct correlation summed tap by tap (one GEMM
    per tap, as a convolution's GEMM accumulates): within 2x of its error, measured 1.1-1.8x. (PyTorch's
    own conv1d is no fixed reference: oneDNN's AVX-512 kernel rounds 2-3.5x better than F(2, 3) here,
    AVX2 kernels worse.)"""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 256, 400, generator=generator)
    w = torch.randn(256, 256, taps, generator=generator) / (256 * taps) ** 0.5
    exact = F.conv1d(x.double(), w.double())
    outputs = x.shape[-1] - taps + 1
    direct = sum(torch.einsum("oc,nct->not", w[:, :, k], x[:, :, k : k + outputs]) for k in range(taps))
    assert (correlate(x, w) - exact).abs().max() <= 2 * (direct - exact).abs().max()


@pytest.mark.parametrize("taps", [1, 2, 3])
def test_each_row_of_b_transposed_is_its_support(taps):
    """Its nonzeros, placed from the offset at the spacing, give the row back (what a 2-D point's
    sparse depthwise kernel reads)."""
    for row in transforms(taps)[0]:
        values, offset, spacing = row_support(row)
        rebuilt = torch.zeros_like(row)
        rebuilt[offset : offset + spacing * len(values) : spacing] = values
        assert torch.equal(rebuilt, row) and len(values) <= 2


@pytest.mark.parametrize("taps, members", [(4, [2, 1, 1, 2]), (7, [3, 2, 2, 3]), (11, [4, 4, 3, 4])])
def test_a_long_kernel_is_chunks_of_three_sharing_f23s_products(taps, members):
    """Chunks 3, 3, ..., then 1 or 2 taps: each chunk point joins the F(2, 3) point with its column
    of A^T, and the tile's two outputs cost sum(members) products of C channels, not 2 * taps."""
    form = axis_form(taps)
    assert [len(m) for m in form.members] == members
    assert torch.equal(form.a_t, transforms(3)[2])
    for point in form.members:  # every row of B^T still has at most two nonzeros, evenly spaced
        for b, g in point:
            values, offset, spacing = row_support(b)
            assert len(values) <= 2 and b.shape == (taps + 1,) and g.shape == (taps,)
