"""transposed_linear: a linear layer over 8-128 rows as (W x^T)^T, the weight a run-time input of
XNNPACK's fully connected operator; delegated, and the same products as x W^T."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.rules import TARGET_RULES
from tests.helpers import assert_one_partition_matching, decisions_of, export, lower_and_run

aten = torch.ops.aten
RULES = ["transposed_linear"]


class Feedforward(nn.Module):
    """A transformer's feed-forward block on [1, rows, 128] (both linears with a bias)."""

    def __init__(self, width=128, hidden=256, bias=True):
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden, bias=bias), nn.Linear(hidden, width, bias=bias)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [8, 16, 94])
def test_weight_first_linears_in_one_partition(rows, bias):
    x = torch.randn(1, rows, 128)
    ep = export(Feedforward(bias=bias), x)
    rewritten = phaseconv.rewrite(ep, RULES)
    weight_first = [n for n in rewritten.graph.nodes if n.target == aten.linear.default]
    assert len(weight_first) == 2 and all(n.args[1].op == "call_function" for n in weight_first)
    summary, (y,) = assert_one_partition_matching(rewritten, ep, x)
    assert summary.inside.get("XNNFullyConnected") == 2, summary  # not a portable matrix product
    _, (stock,) = lower_and_run(ep, x)
    if not bias:  # the same sums in the same order: the same floats as the stock operator's
        assert torch.equal(y, stock)


class SlicedHeads(nn.Module):
    """A linear over an attention's queries, sliced from a wider projection: rows not contiguous."""

    def __init__(self):
        super().__init__()
        self.project, self.rotate = nn.Linear(128, 384), nn.Linear(64, 64)

    def forward(self, x):  # [1, 16, 128] -> queries [1, 16, 4, 64], a slice of [1, 16, 384]
        return self.rotate(self.project(x)[..., :256].view(1, 16, 4, 64))


def test_rows_laid_out_otherwise_are_copied_into_rows():
    x = torch.randn(1, 16, 128)
    ep = export(SlicedHeads(), x)
    rewritten = phaseconv.rewrite(ep, RULES)
    assert [d.applied for d in decisions_of("transposed_linear", ep, RULES)] == [True, True]
    assert_one_partition_matching(rewritten, ep, x)


def test_declines_few_rows_narrow_weights_and_dynamic_rows():
    ep = export(Feedforward(), torch.randn(1, 4, 128))
    assert all("4 rows" in d.reason for d in decisions_of("transposed_linear", ep, RULES))
    narrow = export(nn.Linear(128, 1), torch.randn(16, 128))
    (decision,) = decisions_of("transposed_linear", narrow, RULES)
    assert not decision.applied and "under 64 wide" in decision.reason
    rows = torch.export.Dim("rows", min=8, max=64)
    dynamic = export(nn.Linear(128, 128), torch.randn(16, 128), dynamic_shapes=({0: rows},))
    (decision,) = decisions_of("transposed_linear", dynamic, RULES)
    assert not decision.applied and "dynamic shape" in decision.reason


def test_a_wide_convolution_of_16_steps_becomes_windows_and_a_weight_first_linear():
    conv = nn.Conv1d(512, 512, 7)  # 7.3 MB of weights, past a 2 MB L2: pocket-tts's decoder's first
    x = torch.randn(1, 512, 22)
    ep = export(conv, x)
    decisions = phaseconv.explain(ep, TARGET_RULES["x86-avx512"])
    assert {"short_conv", "transposed_linear"} <= {d.rule for d in decisions if d.applied}, decisions
    rewritten = phaseconv.rewrite(ep, TARGET_RULES["x86-avx512"])
    summary, _ = assert_one_partition_matching(rewritten, ep, x)
    assert summary.inside.get("XNNFullyConnected") == 1, summary
    small = export(nn.Conv1d(128, 128, 3), torch.randn(1, 128, 18))
    (decision,) = decisions_of("short_conv", small, TARGET_RULES["x86-avx512"])
    assert not decision.applied and "they stay in cache" in decision.reason


def test_only_the_intel_avx512_target_takes_it():
    assert "transposed_linear" in {r.name for r in TARGET_RULES["x86-avx512"]}
    assert "transposed_linear" not in {r.name for r in TARGET_RULES["any"]}
    amd = {r.name for r in TARGET_RULES["x86-avx512-amd"]}  # its run-time-weight operator is slow there
    assert {"transposed_linear", "short_conv"}.isdisjoint(amd) and "winograd" in amd
