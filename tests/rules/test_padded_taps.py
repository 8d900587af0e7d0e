"""A 1-D convolution's taps that read only zero padding are dropped: exact, in eager and through XNNPACK."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import phaseconv
from phaseconv.rules.padded_taps import PaddedTapsRule
from tests.helpers import PaddedConv, assert_one_partition_matching, decisions_of, export

RULES = [PaddedTapsRule()]


def _kernels(ep) -> list[int]:
    return [n.args[1].meta["val"].shape[-1] for n in ep.graph.nodes if n.target == torch.ops.aten.conv1d.default]


@pytest.mark.parametrize(
    "module, steps, kernel",
    [
        (PaddedConv(), 2, 2),  # Mimi's first convolution on one frame: taps 5-6 of 7
        (PaddedConv(), 1, 1),
        (PaddedConv(pad=(3, 3)), 2, 3),  # both ends read only padding: taps 2-4
        (PaddedConv(pad=(0, 6)), 1, 1),  # anticausal
        (PaddedConv(stride=2), 2, 1),
        (PaddedConv(taps=3, pad=(4, 0), dilation=2), 1, 1),
        (PaddedConv(taps=3, pad=(0, 0), stride=3, padding=2, channels=(8, 8)), 1, 1),  # the conv's own padding
    ],
)
def test_taps_on_zeros_are_dropped_and_the_program_runs_exactly(module, steps, kernel):
    torch.manual_seed(0)
    x = torch.randn(1, 8, steps)
    ep = export(module, x)
    rewritten = phaseconv.rewrite(ep, RULES)
    assert _kernels(rewritten) == [kernel]
    assert_one_partition_matching(rewritten, ep, x)


@settings(max_examples=60, deadline=None)
@given(
    taps=st.integers(1, 9),
    before=st.integers(0, 10),
    after=st.integers(0, 10),
    stride=st.integers(1, 3),
    dilation=st.integers(1, 3),
    steps=st.integers(1, 6),
)
def test_the_kept_taps_compute_the_same_convolution(taps, before, after, stride, dilation, steps):
    """Every padding, stride and dilation, in float64: the same outputs, or the rule declines."""
    if steps + before + after < dilation * (taps - 1) + 1:
        return  # no output
    generator = torch.Generator().manual_seed(taps * 1000 + before * 100 + after * 10 + steps)
    module = PaddedConv(taps, (before, after), stride, dilation, channels=(3, 2)).double()
    with torch.no_grad():
        module.conv.weight.copy_(torch.randn(module.conv.weight.shape, generator=generator, dtype=torch.float64))
    x = torch.randn(1, 3, steps, generator=generator, dtype=torch.float64)
    rewritten = phaseconv.rewrite(export(module, x), RULES)
    torch.testing.assert_close(rewritten.module()(x), module(x), rtol=1e-12, atol=1e-12)


def test_a_long_input_reads_data_at_every_tap():
    x = torch.randn(1, 8, 20)
    assert decisions_of("padded_taps", export(PaddedConv(), x), RULES) == []


def test_a_nonzero_pad_is_not_taken():
    class OnesPadded(PaddedConv):
        def forward(self, x):
            return self.conv(F.pad(x, self.pad, value=1.0))

    x = torch.randn(1, 8, 2)
    assert decisions_of("padded_taps", export(OnesPadded(), x), RULES) == []


@pytest.mark.parametrize(
    "module, steps, words",
    [
        (PaddedConv(taps=3, pad=(1, 0), dilation=4, channels=(8, 8)), 8, "start inside the input"),
        (PaddedConv(taps=4, pad=(0, 3), dilation=4, channels=(8, 8)), 10, "more outputs"),
    ],
)
def test_declines_what_would_need_a_slice_or_a_crop(module, steps, words):
    x = torch.randn(1, 8, steps)
    (decision,) = decisions_of("padded_taps", export(module, x), RULES)
    assert not decision.applied and words in decision.reason


def test_declines_a_weight_that_zeros_would_not_cancel():
    module = PaddedConv()
    with torch.no_grad():
        module.conv.weight[0, 0, 0] = float("inf")
    (decision,) = decisions_of("padded_taps", export(module, torch.randn(1, 8, 2)), RULES)
    assert not decision.applied and "inf or nan" in decision.reason


def test_declines_a_weight_from_an_input():
    class InputWeight(nn.Module):
        def forward(self, x, weight):
            return F.conv1d(F.pad(x, (6, 0)), weight)

    (decision,) = decisions_of("padded_taps", export(InputWeight(), torch.randn(1, 8, 2), torch.randn(4, 8, 7)), RULES)
    assert not decision.applied and "not a constant" in decision.reason
