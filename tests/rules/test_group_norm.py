"""group_norm: spatial and group averages, delegated and exact, 1-D and 2-D, any number of groups."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten


class ConvNormAct(nn.Module):
    """A VAE decoder's block: conv, group norm, SiLU."""

    def __init__(self, dims: int, channels: int, groups: int, affine: bool = True):
        super().__init__()
        self.conv = (nn.Conv1d if dims == 1 else nn.Conv2d)(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6, affine=affine)
        if affine:  # not the identity
            nn.init.normal_(self.norm.weight)
            nn.init.normal_(self.norm.bias)

    def forward(self, x):
        return torch.nn.functional.silu(self.norm(self.conv(x) + 3.0))  # an offset: the mean matters


@pytest.mark.parametrize(
    "dims, channels, groups, affine",
    [(2, 32, 32, True), (2, 64, 8, True), (2, 16, 1, False), (1, 32, 4, True), (1, 12, 3, False)],
    ids=["32-groups-2d", "8-groups-2d", "one-group", "1d", "1d-no-affine"],
)
def test_group_norm_is_delegated_and_exact(dims, channels, groups, affine):
    x = torch.randn(1, channels, *([9, 7] if dims == 2 else [40]))
    ep = export(ConvNormAct(dims, channels, groups, affine), x)
    (decision,) = decisions_of("group_norm", ep)
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    assert not {aten.group_norm.default, aten.native_group_norm.default} & {n.target for n in rewritten.graph.nodes}
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_averages_as_mean_are_exact_too():
    """The form export_litert takes: group (and 1-D time) averages by mean instead of a linear."""
    from phaseconv.rules.group_norm import GroupNormRule

    for dims in (1, 2):
        x = torch.randn(1, 32, *([9, 7] if dims == 2 else [40]))
        ep = export(ConvNormAct(dims, 32, 8), x)
        rewritten = phaseconv.rewrite(ep, [GroupNormRule(averages_as_linear=False)])
        assert aten.linear.default not in {n.target for n in rewritten.graph.nodes}
        assert_close(run(rewritten, x), run(ep, x))


def test_batch_of_two():
    x = torch.randn(2, 16, 5, 5)
    ep = export(ConvNormAct(2, 16, 4), x)
    assert_close(run(phaseconv.rewrite(ep), x), run(ep, x))


def test_declines_with_a_reason():
    ep = export(nn.GroupNorm(2, 4), torch.randn(1, 4, 2, 3, 3))
    (decision,) = decisions_of("group_norm", ep)
    assert not decision.applied and "a 5-D input" in decision.reason


def test_the_affine_is_one_product_over_x():
    """rsqrt(var + eps) * w on [N, C] values first: over x only the square and the scale."""
    x = torch.randn(1, 32, 9, 7)
    rewritten = phaseconv.rewrite(export(ConvNormAct(2, 32, 8), x))
    full = [
        n for n in rewritten.graph.nodes if n.target == aten.mul.Tensor and tuple(n.meta["val"].shape) == (1, 32, 9, 7)
    ]
    assert len(full) == 2, [n.args for n in full]
