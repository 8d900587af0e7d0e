"""reflect_pad: F.pad(mode="reflect") as one-step slices + cat, delegated and exact."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from tests.helpers import assert_one_partition_matching, export


class ReflectThenConv(nn.Module):
    def __init__(self, pad, dims):
        super().__init__()
        self.pad = pad
        self.conv = (nn.Conv1d if dims == 1 else nn.Conv2d)(3, 3, 3)

    def forward(self, x):
        return self.conv(F.pad(x, self.pad, mode="reflect"))


@pytest.mark.parametrize(
    "pad, shape",
    [((6, 0), (1, 3, 10)), ((2, 3), (1, 3, 5)), ((0, 1), (1, 3, 4)), ((1, 2, 2, 0), (1, 3, 5, 6))],
    ids=["causal-k7", "both-sides", "right-only", "2d"],
)
def test_reflect_pad_is_exact_and_delegated(pad, shape):
    x = torch.randn(shape)
    ep = export(ReflectThenConv(pad, len(shape) - 2), x)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "reflect_pad"]
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    padded = F.pad(x, pad, mode="reflect")
    torch.testing.assert_close(rewritten.module()(x), ep.module()(x), rtol=0, atol=0)
    assert padded.shape[-1] > x.shape[-1]
    assert_one_partition_matching(rewritten, ep, x)
