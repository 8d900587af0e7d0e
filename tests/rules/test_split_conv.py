"""split_conv: a convolution with weights past the cache as parts of 64 output channels, concatenated."""

import pytest
import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.quantize import quantize
from phaseconv.rules.split_conv import SplitConvRule
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten
WITHOUT_SPLIT = [rule for rule in phaseconv.rules.DEFAULT_RULES if rule.name != "split_conv"]


class WideUnit(nn.Module):
    """DAC's residual unit at 200 channels: a dilated k7 conv (1.1 MiB) between activations, a 1x1 conv."""

    def __init__(self, channels=200, bias=True):
        super().__init__()
        self.wide = nn.Conv1d(channels, channels, 7, dilation=3, padding=9, bias=bias)
        self.pointwise = nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        return x + self.pointwise(torch.relu(self.wide(torch.relu(x))))


def conv_outputs(ep) -> list[int]:
    return [n.meta["val"].shape[1] for n in ep.graph.nodes if n.target in (aten.conv1d.default, aten.conv2d.default)]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_parts_of_64_channels_give_the_same_values_bit_for_bit_through_the_runtime(bias):
    x = torch.randn(1, 200, 240)
    ep = export(WideUnit(bias=bias), x)
    rules = [*WITHOUT_SPLIT, SplitConvRule(min_weight_bytes=2**20)]
    (decision,) = decisions_of("split_conv", ep, rules)  # the 1x1 conv's 0.2 MiB: no candidate
    assert decision.applied and "4 convolutions of 64 output channels" in decision.detail, decision
    rewritten = phaseconv.rewrite(ep, rules)
    assert conv_outputs(rewritten) == [64, 64, 64, 8, 200]  # the last part takes what is left
    # eager: PyTorch's CPU convolution picks its blocking by the output width, so the parts may round
    # differently there (they do on an AVX2 machine); XNNPACK sums each output in the same order
    assert_close(run(rewritten, x), run(ep, x))
    _, (split,) = assert_one_partition_matching(rewritten, ep, x, scaled=True)
    (whole,) = LoadedProgram(to_xnnpack(phaseconv.rewrite(ep, WITHOUT_SPLIT)).buffer).run((x,))
    torch.testing.assert_close(split, whole, rtol=0, atol=0)


@pytest.mark.parametrize(
    "module, shape, reason",
    [
        (nn.Conv1d(1024, 512, 1), (1, 1024, 300), "1-tap kernel"),
        (nn.Conv1d(512, 512, 7, padding=3), (1, 512, 80), "80 output positions"),
        (nn.Conv1d(1024, 1024, 2), (1, 1024, 300), "2-tap kernel"),
        (nn.Conv1d(512, 512, 7, padding=3, groups=2), (1, 512, 300), "grouped convolution (2 groups)"),
        (nn.Conv2d(256, 256, 3, padding=1), (1, 256, 16, 16), "2-D convolution: splitting gained 1.02x"),
    ],
    ids=["pointwise", "short-output", "two-taps", "grouped", "2d"],
)
def test_declines_say_why(module, shape, reason):
    ep = export(module, torch.randn(shape))
    decisions = [d for d in decisions_of("split_conv", ep) if not d.applied]
    assert any(reason in d.reason for d in decisions), decisions


def test_weights_that_fit_the_cache_are_no_candidates():
    assert decisions_of("split_conv", export(WideUnit(), torch.randn(1, 200, 240))) == []  # 1.1 MiB


def test_quantized_convolutions_are_left_whole():
    x = torch.randn(1, 384, 240)
    qep = quantize(nn.Sequential(nn.Conv1d(384, 384, 7, padding=3), nn.ReLU()).eval(), [(x,)], rewrite_first=True)
    (decision,) = decisions_of("split_conv", qep)
    assert not decision.applied and "quantized" in decision.reason, decision
    assert [n for n in qep.graph.nodes if n.target == aten.cat.default] == []


def test_a_dynamic_length_is_split_when_its_shortest_pays_and_runs_at_every_length():
    rules = [*WITHOUT_SPLIT, SplitConvRule(min_weight_bytes=2**20)]
    x = torch.randn(1, 200, 240)
    ep = export(WideUnit(), x, dynamic_shapes=({2: Dim("t", min=120, max=480)},))
    assert decisions_of("split_conv", ep, rules)[0].applied
    too_short = export(WideUnit(), x, dynamic_shapes=({2: Dim("t", min=40, max=480)},))
    assert "40 output positions" in decisions_of("split_conv", too_short, rules)[0].reason
    rewritten = phaseconv.rewrite(ep, rules)
    signal = [n for n in ep.graph.nodes if n.op == "placeholder"][-1].meta["val"]
    assert not isinstance(signal.shape[2], int), "the rewrite fixed the length of the program it copied"
    split = LoadedProgram(to_xnnpack(rewritten).buffer)
    whole = LoadedProgram(to_xnnpack(phaseconv.rewrite(ep, WITHOUT_SPLIT)).buffer)
    for length in (120, 333, 480):  # the shortest, an odd one, the longest
        y = torch.randn(1, 200, length)
        torch.testing.assert_close(split.run((y,))[0], whole.run((y,))[0], rtol=0, atol=0)
        torch.testing.assert_close(split.run((y,))[0], run(ep, y), rtol=1e-4, atol=1e-4)
