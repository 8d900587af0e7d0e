"""nearest_conv: a convolution of a nearest upsample as one polyphase convolution, exact and delegated."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, rewrite_applying, run

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


class UpThenConv(nn.Module):
    """Stable Diffusion's Upsample2D: F.interpolate(nearest) then a convolution."""

    def __init__(self, spatial=2, channels=8, out=8, kernel=3, padding=1, scale=2, groups=1, bias=True, **conv):
        super().__init__()
        self.scale = scale
        self.conv = CONV[spatial](channels, out, kernel, padding=padding, groups=groups, bias=bias, **conv)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=self.scale, mode="nearest"))


CASES = {
    "2d-sd-vae": ((1, 8, 6, 5), {}),
    "2d-no-padding": ((1, 8, 6, 6), {"padding": 0}),
    "2d-unequal": ((1, 8, 12, 12), {"scale": (2, 3)}),
    "2d-one-dim": ((1, 8, 6, 6), {"scale": (1, 2)}),
    "2d-groups": ((2, 8, 5, 5), {"groups": 2, "out": 4, "bias": False}),
    "2d-depthwise": ((1, 8, 6, 6), {"groups": 8}),
    "1d-k3": ((1, 8, 9), {}),
    "1d-k5-x3": ((1, 8, 12), {"kernel": 5, "padding": 2, "scale": 3}),
    "3d": ((1, 4, 12, 12, 12), {"channels": 4, "out": 4}),
}


def case(name: str) -> tuple[torch.Tensor, UpThenConv]:
    shape, options = CASES[name]
    return torch.randn(shape), UpThenConv(len(shape) - 2, **options)


@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("name", list(CASES))
def test_upsample_then_conv_is_one_polyphase_convolution(name, decompose):
    x, module = case(name)
    rewritten = rewrite_applying("nearest_conv", export(module, x, decompose=decompose), x)
    targets = {str(n.target) for n in rewritten.graph.nodes if n.op == "call_function"}
    assert not any("upsample" in t or "transpose" in t or "index" in t for t in targets), targets


@pytest.mark.parametrize("name", ["2d-sd-vae", "2d-unequal", "1d-k5-x3"])
def test_through_the_runtime_in_one_partition(name):
    x, module = case(name)
    ep = export(module, x)
    assert_one_partition_matching(phaseconv.rewrite(ep), ep, x, scaled=True)


def test_a_1x1_convolution_moves_before_the_upsample():
    x = torch.randn(1, 8, 5, 7)
    ep = export(UpThenConv(kernel=1, padding=0, out=16), x)
    (decision,) = decisions_of("nearest_conv", ep)
    assert decision.applied and "before the x2x2 upsample" in decision.detail, decision
    rewritten = phaseconv.rewrite(ep)
    (conv,) = [n for n in rewritten.graph.nodes if n.target == torch.ops.aten.conv2d.default]
    assert list(conv.meta["val"].shape[2:]) == [5, 7], "the convolution runs at the input's resolution"
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


class SharedUpsample(nn.Module):
    """The upsampled tensor also feeds a skip: it stays for the skip, the convolution reads x."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        up = F.interpolate(x, scale_factor=2, mode="nearest")
        return self.conv(up) + up


def test_an_upsample_read_elsewhere_stays_for_the_other_reader():
    x = torch.randn(1, 4, 6, 6)
    ep = export(SharedUpsample(), x)
    decisions = {d.rule: d for d in phaseconv.explain(ep)}
    assert decisions["nearest_conv"].applied and decisions["nearest_upsample"].applied
    assert_one_partition_matching(phaseconv.rewrite(ep), ep, x, scaled=True)


class WeightGiven(nn.Module):
    def forward(self, x, weight):
        return F.conv2d(F.interpolate(x, scale_factor=2, mode="nearest"), weight, padding=1)


@pytest.mark.parametrize(
    ("module", "inputs", "words"),
    [
        (UpThenConv(stride=2), (torch.randn(1, 8, 6, 6),), "stride [2, 2]"),
        (UpThenConv(dilation=2, padding=2), (torch.randn(1, 8, 6, 6),), "dilation [2, 2]"),
        (UpThenConv(padding=3), (torch.randn(1, 8, 6, 6),), "padding [3, 3] past kernel"),
        (UpThenConv(scale=2.5), (torch.randn(1, 8, 4, 4),), "not an integer nearest one"),
        (WeightGiven(), (torch.randn(1, 4, 6, 6), torch.randn(4, 4, 3, 3)), "weight is not a constant"),
        (UpThenConv(spatial=3, channels=4, out=4), (torch.randn(1, 4, 3, 3, 3),), "multiply-adds"),
    ],
    ids=["stride", "dilation", "padding", "non-integer", "weight-input", "tiny-3d"],
)
def test_declines_with_the_reason(module, inputs, words):
    ep = export(module, *inputs)
    (decision,) = decisions_of("nearest_conv", ep)
    assert not decision.applied and words in decision.reason, decision
    expected = run(ep, *inputs)
    assert_close(run(phaseconv.rewrite(ep), *inputs), expected, scale=float(expected.abs().max()))


def test_declines_a_dynamic_size():
    x = torch.randn(1, 8, 6, 6)
    ep = export(UpThenConv(), x, dynamic_shapes=({3: torch.export.Dim("width", min=4, max=16)},))
    (decision,) = decisions_of("nearest_conv", ep)
    assert not decision.applied and "dynamic size" in decision.reason, decision
