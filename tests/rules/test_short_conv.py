"""A 1-D convolution of at most 4 outputs becomes a linear layer over its windows: the same sums."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import phaseconv
from phaseconv.rules.short_conv import ShortConvRule, linear_weight
from tests.helpers import PaddedConv, assert_one_partition_matching, decisions_of, export

RULES = [ShortConvRule()]
aten = torch.ops.aten


def _targets(ep) -> list:
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


def test_the_weight_is_indexed_by_tap_then_channel():
    weight = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)  # [o, c, u]
    flat = linear_weight(weight)
    assert flat.shape == (2, 4 * 3)
    for o, c, u in [(0, 0, 0), (1, 2, 3), (0, 1, 2), (1, 0, 1)]:
        assert flat[o, u * 3 + c] == weight[o, c, u]


@pytest.mark.parametrize(
    "module, steps",
    [
        (PaddedConv(taps=2, pad=(1, 0)), 2),  # Mimi's first convolution on one frame, after padded_taps
        (nn.Conv1d(8, 16, 2), 3),  # a polyphase convolution of 2 taps, 2 outputs
        (nn.Conv1d(8, 16, 1, bias=False), 4),
        (nn.Conv1d(8, 16, 3, padding=1, dilation=2), 5),
    ],
)
def test_a_short_convolution_is_one_linear_layer_and_runs_exactly(module, steps):
    torch.manual_seed(0)
    x = torch.randn(2, 8, steps)
    ep = export(module, x)
    rewritten = phaseconv.rewrite(ep, RULES)
    targets = _targets(rewritten)
    assert aten.conv1d.default not in targets and targets.count(aten.linear.default) == 1
    assert_one_partition_matching(rewritten, ep, x)


@settings(max_examples=60, deadline=None)
@given(
    taps=st.integers(1, 5),
    dilation=st.integers(1, 3),
    padding=st.integers(0, 3),
    steps=st.integers(1, 12),
    bias=st.booleans(),
)
def test_the_linear_layer_computes_the_same_convolution(taps, dilation, padding, steps, bias):
    """Every dilation and padding: the same outputs (float rounding), or the rule declines."""
    if steps + 2 * padding < dilation * (taps - 1) + 1:
        return  # no output
    generator = torch.Generator().manual_seed(taps * 1000 + padding * 100 + dilation * 10 + steps)
    module = nn.Conv1d(3, 2, taps, 1, padding, dilation, bias=bias)
    x = torch.randn(1, 3, steps, generator=generator)
    ep = export(module, x)
    (decision,) = decisions_of("short_conv", ep, RULES)
    assert decision.applied == (module(x).shape[-1] <= 4), decision
    with torch.no_grad():
        torch.testing.assert_close(phaseconv.rewrite(ep, RULES).module()(x), module(x))


@pytest.mark.parametrize(
    "module, inputs, words",
    [
        (nn.Conv1d(8, 16, 2), (torch.randn(1, 8, 6),), "5 outputs"),
        (nn.Conv1d(8, 16, 2, groups=4), (torch.randn(1, 8, 3),), "grouped"),
        (nn.Conv1d(8, 16, 2, stride=2), (torch.randn(1, 8, 4),), "strided slices"),
        (nn.Conv1d(8, 16, 2).half(), (torch.randn(1, 8, 3).half(),), "torch.float16"),
    ],
)
def test_declines_long_grouped_strided_or_half_convolutions(module, inputs, words):
    (decision,) = decisions_of("short_conv", export(module, *inputs), RULES)
    assert not decision.applied and words in decision.reason


def test_declines_a_weight_from_an_input():
    class InputWeight(nn.Module):
        def forward(self, x, weight):
            return F.conv1d(x, weight)

    ep = export(InputWeight(), torch.randn(1, 8, 3), torch.randn(4, 8, 2))
    (decision,) = decisions_of("short_conv", ep, RULES)
    assert not decision.applied and "computed in the graph" in decision.reason


def test_declines_a_dynamic_length():
    x = torch.randn(1, 8, 4)
    steps = torch.export.Dim("steps", min=3, max=64)
    ep = export(nn.Conv1d(8, 16, 2), x, dynamic_shapes=({2: steps},))
    (decision,) = decisions_of("short_conv", ep, RULES)
    assert not decision.applied and "dynamic size" in decision.reason
