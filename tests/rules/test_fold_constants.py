"""fold_constants: computations that read only parameters and shapes become constants."""

import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, export, run


class Snake(nn.Module):
    """DAC's Snake: x + 1 / (alpha + 1e-9) * sin(alpha * x)^2, with 1 / (alpha + 1e-9) recomputed per call."""

    def __init__(self, channels=4):
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(1, channels, 1) + 0.5)
        self.conv = nn.Conv1d(channels, channels, 3, padding=1)

    def forward(self, x):
        x = self.conv(x)
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class ShapeMask(nn.Module):
    """A causal mask from the activation's shape (new_ones, tril): depends on no value."""

    def forward(self, x):
        mask = x.new_ones(x.shape[-1], x.shape[-1]).tril().bool()
        return torch.where(mask, x, torch.zeros_like(x)) * 2


def folded(decisions):
    return [d for d in decisions if d.rule == "fold_constants" and d.applied]


def test_snake_reciprocal_is_computed_once_and_delegated():
    x = torch.randn(1, 4, 16)
    ep = export(Snake(), x)
    assert len(folded(phaseconv.explain(ep))) == 1
    rewritten = phaseconv.rewrite(ep)
    targets = {str(n.target) for n in rewritten.graph.nodes}
    assert "aten.reciprocal.default" not in targets and "aten.reciprocal.default" in {
        str(n.target) for n in ep.graph.nodes
    }
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_shape_only_mask_is_folded():
    x = torch.randn(1, 2, 6, 6)
    ep = export(ShapeMask(), x)
    rewritten = phaseconv.rewrite(ep)
    targets = {str(n.target) for n in rewritten.graph.nodes}
    assert not targets & {"aten.new_ones.default", "aten.tril.default"}, targets
    torch.testing.assert_close(run(rewritten, x), run(ep, x), rtol=0, atol=0)


class RandomAndMutated(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))
        self.scale = nn.Parameter(torch.ones(1, 4, 1))

    def forward(self, x):
        self.count.add_(1)
        return x * torch.rand(1, 4, 1) + self.count * 2 + self.scale.view(1, 4, 1)


def test_random_values_mutated_buffers_and_plain_views_are_not_folded():
    ep = export(RandomAndMutated(), torch.randn(1, 4, 8))
    assert folded(phaseconv.explain(ep)) == []


class HugeExpansion(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1, 64, 1))

    def forward(self, x):
        return x + (self.bias * 2).expand(1, 64, 40000)


def test_a_folded_value_much_larger_than_its_constants_is_declined():
    (decision,) = [d for d in phaseconv.explain(export(HugeExpansion(), torch.randn(1, 64, 40000))) if not d.applied]
    assert decision.rule == "fold_constants" and "MiB" in decision.reason, decision


def test_the_original_program_is_untouched():
    x = torch.randn(1, 4, 16)
    ep = export(Snake(), x)
    before = ep.graph_module.code
    phaseconv.rewrite(ep)
    assert ep.graph_module.code == before


class Positions(nn.Module):
    """x + arange(T) (positions from the length) and x + arange(T) / T (not a prefix of the longest)."""

    def __init__(self, normalized: bool = False):
        super().__init__()
        self.normalized = normalized

    def forward(self, x):
        positions = torch.arange(x.shape[-1], dtype=x.dtype)
        if self.normalized:
            positions = positions / x.shape[-1]
        return torch.relu(x) + positions


def test_a_value_of_the_dynamic_length_is_folded_at_the_longest_and_sliced():
    from torch.export import Dim

    ep = export(Positions(), torch.randn(1, 4, 8), dynamic_shapes=({2: Dim("t", min=2, max=50)},))
    (decision,) = folded(phaseconv.explain(ep))
    assert "at the longest length (50), sliced to the run-time length" in decision.detail
    rewritten = phaseconv.rewrite(ep)
    assert not any(n.target == torch.ops.aten.arange.default for n in rewritten.graph.nodes)
    for length in (2, 17, 50):
        x = torch.randn(1, 4, length)
        assert torch.equal(run(rewritten, x), run(ep, x))


def test_a_value_that_is_not_a_leading_block_of_the_longest_is_left():
    from torch.export import Dim

    ep = export(Positions(normalized=True), torch.randn(1, 4, 8), dynamic_shapes=({2: Dim("t", min=2, max=50)},))
    reasons = [d.reason for d in phaseconv.explain(ep) if d.rule == "fold_constants" and not d.applied]
    assert any("is not the leading block of its value at 50" in reason for reason in reasons), reasons


def test_a_value_of_a_length_no_input_has_itself_is_left():
    """An input of length 2t: the slices could not read t at run time, so nothing is folded."""
    from torch.export import Dim

    ep = export(Positions(), torch.randn(1, 4, 8), dynamic_shapes=({2: 2 * Dim("t", min=1, max=25)},))
    reasons = [d.reason for d in phaseconv.explain(ep) if d.rule == "fold_constants" and not d.applied]
    assert any("no input has the dynamic size itself" in reason for reason in reasons), reasons
    x = torch.randn(1, 4, 14)
    assert torch.equal(run(phaseconv.rewrite(ep), x), run(ep, x))


class SquareMask(nn.Module):
    """Scores of T tokens against each other plus a [T, T] causal mask built from arange(T)."""

    def forward(self, x):
        index = torch.arange(x.shape[1])
        mask = (index[:, None] >= index[None, :]).to(x.dtype) * 3
        return x @ x.transpose(1, 2) + mask


def test_a_square_value_of_the_dynamic_length_lowers_with_its_input_still_dynamic():
    """[T, T] sliced from a constant of T's longest length has strides that could be a contiguous
    tensor's at that length: exported there, the lowering's retrace would fix T. It runs at both ends."""
    from torch.export import Dim

    from tests.helpers import lower_and_run

    ep = export(SquareMask(), torch.randn(1, 32, 4), dynamic_shapes=({1: Dim("t", min=2, max=32)},))
    (decision,) = folded(phaseconv.explain(ep))
    assert "at the longest length (32)" in decision.detail
    rewritten = phaseconv.rewrite(ep)
    for length in (2, 19, 32):
        x = torch.randn(1, length, 4)
        _, (actual,) = lower_and_run(rewritten, x)
        assert_close(actual, run(ep, x))
