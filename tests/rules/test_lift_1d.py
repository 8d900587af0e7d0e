"""lift_1d: chains of conv1d and elementwise ops run on [N, C, T, 1], channels-last in XNNPACK."""

import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten
WITHOUT_LIFT = [rule for rule in phaseconv.rules.DEFAULT_RULES if rule.name != "lift_1d"]


class ResidualUnit(nn.Module):
    """SEANet's residual unit with a causal pad, a dilated conv, a no-op reshape and a crop."""

    def __init__(self, channels=8):
        super().__init__()
        self.first = nn.Conv1d(channels, channels // 2, 3, dilation=2)
        self.second = nn.Conv1d(channels // 2, channels, 1)
        self.alpha = nn.Parameter(torch.rand(1, channels // 2, 1) + 0.5)

    def forward(self, x):
        y = self.first(nn.functional.pad(nn.functional.elu(x), [4, 0]))
        y = y.reshape(y.shape[0], y.shape[1], -1)
        y = y + torch.sin(self.alpha * y) ** 2  # DAC's snake, with a per-channel constant
        y = nn.functional.pad(nn.functional.elu(y), [1, 1])
        return x + self.second(y)[..., 1:-1]


class Decoder(nn.Module):
    """Two residual units around a strided transposed conv (its interleave splits the regions)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Conv1d(4, 8, 5, padding=2)
        self.unit = ResidualUnit(8)
        self.up = nn.ConvTranspose1d(8, 4, 4, stride=2, padding=1)
        self.tail = ResidualUnit(4)

    def forward(self, x):
        return torch.tanh(self.tail(self.up(nn.functional.elu(self.unit(self.head(x))))))


def conv_dims(ep) -> list[int]:
    return [n.meta["val"].dim() for n in ep.graph.nodes if n.op == "call_function" and "conv" in str(n.target)]


def test_every_1d_conv_runs_on_4d_tensors_and_gives_the_same_values():
    x = torch.randn(1, 4, 40)
    ep = export(Decoder(), x)
    rewritten = phaseconv.rewrite(ep)
    assert conv_dims(rewritten) and set(conv_dims(rewritten)) == {4}
    applied = [d for d in phaseconv.explain(ep) if d.rule == "lift_1d" and d.applied]
    assert len(applied) == 2, applied  # one region per side of the interleave
    torch.testing.assert_close(run(rewritten, x), run(phaseconv.rewrite(ep, WITHOUT_LIFT), x), rtol=1e-6, atol=1e-6)


def test_lifted_program_is_one_partition_with_fewer_layout_transposes_and_the_same_bits():
    x = torch.randn(1, 4, 40)
    ep = export(Decoder(), x)
    summary, (lifted,) = assert_one_partition_matching(phaseconv.rewrite(ep), ep, x)
    buffer = to_xnnpack(phaseconv.rewrite(ep, WITHOUT_LIFT)).buffer
    flat = summarize_pte(buffer)
    assert summary.layout_transposes < flat.layout_transposes, (summary, flat)
    (left_3d,) = LoadedProgram(buffer).run((x,))
    assert torch.equal(lifted, left_3d), "the runtime computes the same products and sums either way"


def test_pads_before_the_first_conv_of_a_region_stay_3d():
    """A pad of an NCHW [N, C, T, 1] tensor runs one element per row in XNNPACK: only what a conv
    feeds is lifted."""
    x = torch.randn(1, 8, 30)
    rewritten = phaseconv.rewrite(export(ResidualUnit(), x))
    pads = [n for n in rewritten.graph.nodes if n.target in (aten.pad.default, aten.constant_pad_nd.default)]
    assert [n.meta["val"].dim() for n in pads] == [3, 4], [n.format_node() for n in pads]


def test_a_region_leaving_as_the_program_output_keeps_the_output_shape():
    x = torch.randn(1, 4, 16)
    ep = export(nn.Sequential(nn.Conv1d(4, 6, 3), nn.ReLU(), nn.Conv1d(6, 2, 3)), x)
    rewritten = phaseconv.rewrite(ep)
    assert run(rewritten, x).shape == (1, 2, 12)
    assert_one_partition_matching(rewritten, ep, x)


class CausalUnit(nn.Module):
    """SEANet's residual unit without a crop: causal pads, a dilated conv, DAC's snake."""

    def __init__(self, channels=8):
        super().__init__()
        self.first = nn.Conv1d(channels, channels // 2, 3, dilation=2)
        self.second = nn.Conv1d(channels // 2, channels, 3)
        self.alpha = nn.Parameter(torch.rand(1, channels // 2, 1) + 0.5)

    def forward(self, x):
        y = self.first(nn.functional.pad(nn.functional.elu(x), [4, 0]))
        y = y + torch.sin(self.alpha * y) ** 2
        return x + self.second(nn.functional.pad(nn.functional.elu(y), [2, 0]))


def test_a_dynamic_length_is_the_views_inferred_size():
    x = torch.randn(1, 8, 30)
    ep = export(nn.Sequential(nn.Conv1d(8, 8, 1), CausalUnit()), x, dynamic_shapes=({2: Dim("t", min=10, max=64)},))
    (decision,) = decisions_of("lift_1d", ep)
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    signal = [n for n in ep.graph.nodes if n.op == "placeholder"][-1].meta["val"]
    assert not isinstance(signal.shape[2], int), "the rewrite fixed the length of the program it copied"
    assert set(conv_dims(rewritten)) == {4}
    views = [n.args[1] for n in rewritten.graph.nodes if n.target == aten.view.default]
    assert views and all(shape.count(-1) == 1 for shape in views), views
    buffer = to_xnnpack(rewritten).buffer
    flat = summarize_pte(to_xnnpack(phaseconv.rewrite(ep, WITHOUT_LIFT)).buffer)
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    assert summary.layout_transposes < flat.layout_transposes, (summary, flat)
    program = LoadedProgram(buffer)
    for length in (10, 37, 64):  # the shortest, an odd one, the longest
        y = torch.randn(1, 8, length)
        assert_close(program.run((y,))[0], run(ep, y))


def test_a_slice_of_a_dynamic_length_is_left_with_the_reason():
    x = torch.randn(1, 8, 30)
    ep = export(ResidualUnit(), x, dynamic_shapes=({2: Dim("t", min=10, max=64)},))
    (decision,) = decisions_of("lift_1d", ep)
    assert not decision.applied and "slice of a dynamic length" in decision.reason
    program = LoadedProgram(to_xnnpack(phaseconv.rewrite(ep)).buffer)
    longer = torch.randn(1, 8, 64)
    assert_close(program.run((longer,))[0], run(ep, longer))


class UserWeights(nn.Module):
    def forward(self, x, w):
        return nn.functional.conv1d(torch.relu(nn.functional.conv1d(x, w)), w)


def test_a_weight_from_the_inputs_is_left_with_the_reason():
    x, w = torch.randn(1, 4, 20), torch.randn(4, 4, 3)
    ep = export(UserWeights(), x, w)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "lift_1d"]
    assert not decision.applied and "weight is not a constant" in decision.reason
    assert_close(run(phaseconv.rewrite(ep), x, w), run(ep, x, w))


class ReflectPaddedUnit(nn.Module):
    """EnCodec's convolutions: reflect padding (the mode_pad rule: one-step slices and a cat along
    time) between two convolutions."""

    def __init__(self, channels=8):
        super().__init__()
        self.first = nn.Conv1d(channels, channels, 3)
        self.second = nn.Conv1d(channels, channels, 7)

    def forward(self, x):
        y = nn.functional.elu(self.first(x))
        return self.second(nn.functional.pad(y, [3, 3], mode="reflect"))


def test_a_cat_along_time_stays_in_the_region_and_the_program_in_one_layout():
    x = torch.randn(1, 8, 40)
    ep = export(ReflectPaddedUnit(), x)
    rewritten = phaseconv.rewrite(ep)
    cats = [n for n in rewritten.graph.nodes if n.target == aten.cat.default]
    assert [(n.meta["val"].dim(), n.args[1]) for n in cats] == [(4, 2)], "the reflect pad's cat, on [N, C, T, 1]"
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "lift_1d"]
    assert decision.applied and "2 conv1d" in decision.detail
    summary, _ = assert_one_partition_matching(rewritten, ep, x)
    # split at the cat, neither convolution had a region of two: each ran between its own reshapes
    flat = summarize_pte(to_xnnpack(phaseconv.rewrite(ep, WITHOUT_LIFT)).buffer)
    assert summary.layout_transposes < flat.layout_transposes, (summary, flat)
