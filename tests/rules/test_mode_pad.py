"""mode_pad: F.pad(mode="reflect" | "replicate" | "circular") as slices + cat, delegated and exact."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from phaseconv.rules.mode_pad import ModePadRule
from tests.helpers import assert_one_partition_matching, decisions_of, export


class PadThenConv(nn.Module):
    def __init__(self, pad, dims, mode):
        super().__init__()
        self.pad, self.mode = pad, mode
        self.conv = (nn.Conv1d if dims == 1 else nn.Conv2d)(3, 3, 3)

    def forward(self, x):
        return self.conv(F.pad(x, self.pad, mode=self.mode))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    "pad, shape",
    [((6, 0), (1, 3, 10)), ((2, 3), (1, 3, 5)), ((0, 1), (1, 3, 4)), ((1, 2, 2, 0), (1, 3, 5, 6))],
    ids=["causal-k7", "both-sides", "right-only", "2d"],
)
def test_padding_is_exact_and_delegated(mode, pad, shape):
    x = torch.randn(shape)
    ep = export(PadThenConv(pad, len(shape) - 2, mode), x)
    (decision,) = decisions_of("mode_pad", ep)
    assert decision.applied and mode in decision.detail, decision
    rewritten = phaseconv.rewrite(ep)
    torch.testing.assert_close(rewritten.module()(x), ep.module()(x), rtol=0, atol=0)  # the same elements, moved
    assert_one_partition_matching(rewritten, ep, x)


def test_declines_with_a_reason():
    class Crops(nn.Module):
        def forward(self, x):
            return F.pad(x, (-1, 2), mode="circular")

    (decision,) = decisions_of("mode_pad", export(Crops(), torch.randn(1, 2, 6)))
    assert not decision.applied and "negative padding (-1, 2) crops" in decision.reason


def test_onnx_export_takes_reflect_only():
    ep = export(PadThenConv((2, 2), 1, "replicate"), torch.randn(1, 3, 8))
    assert decisions_of("mode_pad", ep, [ModePadRule(modes=("reflect",))]) == []
