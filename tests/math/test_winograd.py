"""Winograd's F(2, r) on plain tensors: the transforms, and the correlation they compute."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from phaseconv.math.winograd import correlate, row_support, transforms


def test_f23_is_the_known_algorithm():
    """Points 0, 1, -1 and infinity: integer input and output transforms, halves in G."""
    b_t, g, a_t = transforms(3)
    assert b_t.tolist() == [[-1, 0, 1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]]
    assert g.tolist() == [[-1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]
    assert a_t.tolist() == [[1, 1, 1, 0], [0, 1, -1, 1]]


@settings(max_examples=60, deadline=None)
@given(
    taps=st.integers(2, 5),
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


def test_float32_rounding_is_no_worse_than_the_direct_form():
    """Half-length sums per point: F(2, 3) rounds less than the direct 3-tap sum here."""
    x = torch.randn(1, 256, 400)
    w = torch.randn(256, 256, 3) / (256 * 3) ** 0.5
    exact = F.conv1d(x.double(), w.double())
    direct = (F.conv1d(x, w) - exact).abs().max()
    assert (correlate(x, w) - exact).abs().max() <= 2 * direct


@pytest.mark.parametrize("taps", [1, 2, 3])
def test_each_row_of_b_transposed_is_its_support(taps):
    """Its nonzeros, placed from the offset at the spacing, give the row back (what a 2-D point's
    sparse depthwise kernel reads)."""
    for row in transforms(taps)[0]:
        values, offset, spacing = row_support(row)
        rebuilt = torch.zeros_like(row)
        rebuilt[offset : offset + spacing * len(values) : spacing] = values
        assert torch.equal(rebuilt, row) and len(values) <= 2
