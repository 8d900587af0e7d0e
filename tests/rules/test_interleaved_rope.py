"""interleaved_rope: RoPE on interleaved pairs (Kyutai's apply_rope) becomes x * C + (x @ P) * S."""

import math

import pytest
import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.rules import PRE_QUANTIZATION_RULES
from phaseconv.rules.interleaved_rope import pair_swap
from tests.helpers import assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten


def apply_rope(q, k, offset, max_period=10_000.0):
    """pocket-tts's modules/rope.py apply_rope, as written there."""
    _, t, _, d = q.shape
    freqs = torch.exp(torch.arange(d // 2, dtype=torch.float32) * (-math.log(max_period) * 2 / d))
    ts = (torch.arange(t, dtype=torch.float32) + offset).view(-1, 1, 1)
    q, k = q.view(*q.shape[:-1], d // 2, 2), k.view(*k.shape[:-1], d // 2, 2)
    qr, qi, kr, ki = q[..., 0].float(), q[..., 1].float(), k[..., 0].float(), k[..., 1].float()
    rotr, roti = torch.cos(freqs * ts), torch.sin(freqs * ts)
    qo = torch.stack([qr * rotr - qi * roti, qr * roti + qi * rotr], dim=-1)
    ko = torch.stack([kr * rotr - ki * roti, kr * roti + ki * rotr], dim=-1)
    return qo.view(*qo.shape[:-2], d), ko.view(*ko.shape[:-2], d)


class Rotary(nn.Module):
    """Queries and keys projected from x, rotated at the position `offset` holds."""

    def __init__(self, heads=4, width=16):
        super().__init__()
        self.heads, self.width = heads, width
        self.project = nn.Linear(heads * width, 2 * heads * width)

    def forward(self, x, offset):
        b, t, _ = x.shape
        q, k = self.project(x).view(b, t, 2, self.heads, self.width).unbind(2)
        q, k = apply_rope(q, k, offset)
        return q * 1.5 + k


class Swapped(Rotary):
    """a*cos + b*sin in the first part: not a rotation."""

    def forward(self, x, offset):
        q = self.project(x)[..., : self.heads * self.width].view(*x.shape[:2], self.heads, self.width // 2, 2)
        a, b = q[..., 0], q[..., 1]
        return torch.stack([a * torch.cos(offset) + b * torch.sin(offset), a * torch.sin(offset) + b], dim=-1)


class ScalarTerms(Rotary):
    """A stack of a difference and a sum with a number: not a rotation either."""

    def forward(self, x, offset):
        y = self.project(x)
        return torch.stack([y - 1.0, y + offset], dim=-1)


def inputs(steps=3):
    return torch.randn(1, steps, 64), torch.tensor([37.0])


def test_pair_swap_matrix_swaps_pairs_with_a_sign():
    x = torch.randn(3, 8)
    swapped = torch.nn.functional.linear(x, pair_swap(8, torch.float32))
    pairs = x.view(3, 4, 2)
    assert torch.equal(swapped, torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).view(3, 8))


def test_rope_becomes_a_linear_and_products_with_the_same_values():
    ep = export(Rotary(), *inputs())
    decisions = decisions_of("interleaved_rope", ep)
    assert len(decisions) == 2 and all(d.applied for d in decisions), decisions
    rewritten = phaseconv.rewrite(ep)
    targets = [n.target for n in rewritten.graph.nodes]
    assert aten.stack.default not in targets and aten.select.int not in targets
    for _ in range(3):
        x = inputs()
        assert torch.equal(run(rewritten, *x), run(ep, *x))  # the same floating-point operations


def test_rewritten_rope_runs_in_one_partition_like_eager():
    ep = export(Rotary(), *inputs())
    rewritten = phaseconv.rewrite(ep)
    assert_one_partition_matching(rewritten, ep, *inputs(), scaled=True)


def test_queries_and_keys_share_one_doubled_cos_and_sin():
    rewritten = phaseconv.rewrite(export(Rotary(), *inputs()))
    cosines = [n for n in rewritten.graph.nodes if n.target == aten.cos.default]
    assert len(cosines) == 1 and len(cosines[0].users) == 1  # its view to [..., n, 1], then the ones


@pytest.mark.parametrize("module", [Swapped(), ScalarTerms()], ids=["sum for difference", "scalar terms"])
def test_other_stacks_are_declined_with_the_reason(module):
    (decision,) = decisions_of("interleaved_rope", export(module, *inputs()))
    assert not decision.applied and "not a rotation of interleaved pairs" in decision.reason


def test_a_dynamic_length_is_rewritten_with_it_inferred_and_runs_at_both_ends():
    from tests.helpers import lower_and_run

    ep = export(Rotary(), *inputs(32), dynamic_shapes=({1: Dim("t", min=2, max=64)}, None))
    decisions = decisions_of("interleaved_rope", ep)
    assert len(decisions) == 2 and all(d.applied for d in decisions), decisions
    rewritten = phaseconv.rewrite(ep)
    assert aten.stack.default not in [n.target for n in rewritten.graph.nodes]
    for steps in (2, 64):
        x = inputs(steps)
        assert torch.equal(run(rewritten, *x), run(ep, *x))
        _, (actual,) = lower_and_run(rewritten, *x)
        torch.testing.assert_close(actual, run(ep, *x))


def test_two_dynamic_sizes_in_one_shape_are_declined():
    dynamic = ({0: Dim("b", min=1, max=4), 1: Dim("t", min=2, max=64)}, None)
    ep = export(Rotary(), torch.randn(2, 3, 64), torch.tensor([37.0]), dynamic_shapes=dynamic)
    decisions = decisions_of("interleaved_rope", ep)
    assert decisions and all(not d.applied and "two dynamic sizes" in d.reason for d in decisions)


def test_quantization_keeps_the_rotation_out_of_int8():
    assert "interleaved_rope" not in {rule.name for rule in PRE_QUANTIZATION_RULES}


def test_parts_already_sliced_by_the_views_rule_are_taken_too():
    ep = export(Rotary(), *inputs())
    sliced = phaseconv.rewrite(ep, ["views"])  # r[..., i] as a view of a one-wide slice
    assert aten.select.int not in [n.target for n in sliced.graph.nodes]
    decisions = decisions_of("interleaved_rope", sliced)
    assert len(decisions) == 2 and all(d.applied for d in decisions), decisions
    x = inputs()
    assert torch.equal(run(phaseconv.rewrite(sliced), *x), run(ep, *x))
