"""Scalar gains and low-rank constant operands lifted to the activation's rank."""

import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, export, run


class GainAndNoise(nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1).to(dtype)
        self.register_buffer("noise", torch.randn(8, 8, dtype=dtype))
        self.strength = nn.Parameter(torch.tensor(0.1, dtype=dtype))

    def forward(self, x):
        y = self.conv(x) + self.noise * self.strength
        return self.conv(F.leaky_relu(y, 0.2) * 1.4142 - 3)


def test_gain_and_noise_become_rank_4_constants():
    x = torch.randn(1, 4, 8, 8)
    ep = export(GainAndNoise(), x)
    decisions = phaseconv.explain(ep)
    expected = ["fold_constants"] + ["constant_operands"] * 3  # noise * strength computed once, then lifted
    assert [d.rule for d in decisions] == expected and all(d.applied for d in decisions)
    rewritten = phaseconv.rewrite(ep)
    for node in rewritten.graph.nodes:
        if node.target in (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.sub.Tensor):
            assert all(isinstance(a, torch.fx.Node) and a.meta["val"].dim() == 4 for a in node.args[:2]), node
    assert "noise" not in rewritten.state_dict, "the folded noise * strength replaces the [H, W] buffer"
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_fp16_gain_leaves_no_cast_outside_the_delegate():
    x = torch.randn(1, 4, 8, 8, dtype=torch.float16)
    ep = export(GainAndNoise(torch.float16), x)
    assert summarize_pte(to_xnnpack(ep).buffer).outside, "stock casts the lifted fp32 scalars outside"
    assert_one_partition_matching(phaseconv.rewrite(ep), ep, x, scaled=True)


def test_operands_computed_from_inputs_are_left_alone():
    class InputBias(nn.Module):
        def forward(self, x, bias):
            return x + bias

    x, bias = torch.randn(1, 2, 4, 4), torch.randn(4, 4)
    (decision,) = phaseconv.explain(export(InputBias(), x, bias))
    assert not decision.applied and "program input" in decision.reason


def test_an_operand_computed_from_no_placeholder_becomes_a_constant_too():
    """`arange` reshaped: constant, but with no parameter to inherit from (used to fail when the
    rule ran without fold_constants)."""

    class Ramp(nn.Module):
        def forward(self, x):
            return x * torch.arange(4.0).reshape(4, 1)

    x = torch.randn(1, 4, 3)
    ep = export(Ramp(), x)
    rewritten = phaseconv.rewrite(ep, ["constant_operands"])
    assert torch.equal(run(rewritten, x), run(ep, x))
