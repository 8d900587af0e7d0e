"""Quantized transposed convolutions: rewritten in the int8 domain, and rewritten float layers quantized."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.errors import PhaseconvError
from phaseconv.graph.quantized import DEQUANTIZE_PER_CHANNEL, QUANTIZE
from phaseconv.math.polyphase import phase_weight
from phaseconv.quantize import quantize, snr_db
from tests.helpers import decisions_of, lower_and_run, run, transposed_convs

aten = torch.ops.aten


def layer(deconv: nn.Module, channels: int, relu: bool = False) -> nn.Module:
    """conv -> deconv [-> relu] -> conv: the deconvolution between int8 neighbours, as in a decoder."""
    out = deconv.out_channels
    parts = [
        nn.Conv1d(channels, deconv.in_channels, 3, padding=1)
        if deconv.__class__ is nn.ConvTranspose1d
        else nn.Conv2d(channels, deconv.in_channels, 3, padding=1),
        deconv,
    ]
    if relu:
        parts.append(nn.ReLU())
    parts.append(nn.Conv1d(out, 8, 3) if deconv.__class__ is nn.ConvTranspose1d else nn.Conv2d(out, 8, 3))
    return nn.Sequential(*parts).eval()


CASES = {
    "1d-k8-s4-p2-relu": (lambda: layer(nn.ConvTranspose1d(32, 16, 8, 4, padding=2), 16, relu=True), (1, 16, 20)),
    "1d-k16-s8-p4": (lambda: layer(nn.ConvTranspose1d(64, 32, 16, 8, padding=4), 16), (1, 16, 12)),
    "1d-k7-s4-output-padding": (
        lambda: layer(nn.ConvTranspose1d(32, 16, 7, 4, padding=1, output_padding=1), 16),
        (1, 16, 10),
    ),
    "1d-k8-s4-output-padding-over-padding": (  # padded unequally: an explicit pad, requantized
        lambda: layer(nn.ConvTranspose1d(32, 16, 8, 4, padding=2, output_padding=3), 16),
        (1, 16, 20),
    ),
    "2d-k4-s2-p1-deep": (lambda: layer(nn.ConvTranspose2d(256, 16, 4, 2, padding=1), 8), (1, 8, 6, 6)),
}


def quantized_case(name: str):
    torch.manual_seed(0)
    factory, shape = CASES[name]
    model, x = factory(), torch.randn(shape)
    calibration = [(torch.randn(shape),) for _ in range(3)] + [(x,)]
    return model, x, calibration


def output_step(ep) -> float:
    """The scale of the program's last quantize: one int8 step of its output."""
    return [n for n in ep.graph.nodes if n.target == QUANTIZE][-1].args[1]


@pytest.mark.parametrize("name", list(CASES))
def test_quantize_then_rewrite_is_the_same_int8_layer(name):
    model, x, calibration = quantized_case(name)
    quantized = quantize(model, calibration)
    (decision,) = [d for d in phaseconv.explain(quantized) if d.rule == "conv_transpose"]
    assert decision.applied and "int8 weight re-arranged" in decision.detail, decision
    rewritten = phaseconv.rewrite(quantized)
    assert not transposed_convs(rewritten)
    expected, step = run(quantized, x), output_step(quantized)
    torch.testing.assert_close(run(rewritten, x), expected, rtol=0, atol=step * 1.01)
    summary, (out,) = lower_and_run(rewritten, x)
    assert summary.partitions == 1 and not summary.outside, summary
    assert summary.inside["XNNConvert"] == 2, "int8 from the program's input to its output"
    assert "XNNConvTranspose2d" not in summary.inside
    torch.testing.assert_close(out, expected, rtol=0, atol=step * 1.01)


def test_int8_weight_is_the_original_values_rearranged_with_scales_repeated_per_phase():
    model, x, calibration = quantized_case("1d-k8-s4-p2-relu")
    quantized = quantize(model, calibration)
    (original,) = [
        n for n in quantized.graph.nodes if n.target == DEQUANTIZE_PER_CHANNEL and n.args[3] == 1
    ]  # a transposed weight's output channels are axis 1
    rewritten = phaseconv.rewrite(quantized)
    (new,) = [
        n
        for n in rewritten.graph.nodes
        if n.target == DEQUANTIZE_PER_CHANNEL
        and any(u.target == aten.conv1d.default for u in n.users)
        and n.args[0].meta["val"].shape[0] == 64
    ]
    assert new.args[3] == 0, "the phase convolution's output channels are axis 0"

    def value(ep, node):
        name = ep.graph_signature.inputs_to_buffers.get(node.name) or ep.graph_signature.inputs_to_parameters[node.name]
        return ep.state_dict[name]

    int8 = value(quantized, original.args[0])
    assert torch.equal(value(rewritten, new.args[0]), phase_weight(int8, [4], [1], 1)), "no value re-rounded"
    assert torch.equal(value(rewritten, new.args[1]), value(quantized, original.args[1]).repeat(4))


class GroupedInt8(nn.Module):
    """A grouped transposed convolution with an int8 weight quantized per output channel (axis 1)."""

    def __init__(self, groups: int, axis: int = 1):
        super().__init__()
        torch.manual_seed(1)
        shape = (8, 16 // groups, 8)
        self.register_buffer("values", torch.randint(-127, 128, shape, dtype=torch.int8))
        self.register_buffer("scale", torch.rand(shape[axis]) * 0.01 + 0.001)
        self.register_buffer("zero_point", torch.zeros(shape[axis], dtype=torch.int64))
        self.bias = nn.Parameter(torch.randn(16))
        self.groups, self.axis = groups, axis

    def forward(self, x):
        w = torch.ops.quantized_decomposed.dequantize_per_channel(
            self.values, self.scale, self.zero_point, self.axis, -127, 127, torch.int8
        )
        return nn.functional.conv_transpose1d(x, w, self.bias, stride=4, padding=2, groups=self.groups)


@pytest.mark.parametrize("groups", [1, 2, 8], ids=["dense", "grouped", "depthwise"])
def test_grouped_and_depthwise_int8_weights(groups):
    x = torch.randn(1, 8, 9)
    ep = torch.export.export(GroupedInt8(groups).eval(), (x,))
    (decision,) = decisions_of("conv_transpose", ep)
    assert decision.applied and "int8 weight" in decision.detail, decision
    rewritten = phaseconv.rewrite(ep)
    assert not transposed_convs(rewritten)
    torch.testing.assert_close(run(rewritten, x), run(ep, x), rtol=1e-5, atol=1e-5)


def test_declines_a_weight_quantized_on_its_input_channels():
    x = torch.randn(1, 8, 9)
    ep = torch.export.export(GroupedInt8(1, axis=0).eval(), (x,))
    (decision,) = decisions_of("conv_transpose", ep)
    assert not decision.applied and "axis 0" in decision.reason


def test_declines_a_shallow_int8_2d_layer_where_xnnpack_deconvolution_wins():
    torch.manual_seed(0)
    model, x = layer(nn.ConvTranspose2d(16, 8, 4, 2, padding=1), 8), torch.randn(1, 8, 6, 6)
    (decision,) = [d for d in phaseconv.explain(quantize(model, (x,))) if d.rule == "conv_transpose"]
    assert not decision.applied and "64 multiply-adds per output" in decision.reason, decision


@pytest.mark.parametrize(
    "deconv, shape",
    [
        (nn.ConvTranspose1d(32, 16, 8, 4, padding=2), (1, 16, 20)),
        (nn.ConvTranspose1d(16, 16, 4, 2, padding=1, groups=16), (1, 16, 20)),
        (nn.ConvTranspose2d(16, 8, 4, 2, padding=1), (1, 8, 6, 6)),
    ],
    ids=["1d", "1d-depthwise", "2d"],
)
def test_rewrite_then_quantize_runs_every_step_in_int8(deconv, shape):
    torch.manual_seed(0)
    model, x = layer(deconv, shape[1], relu=True), torch.randn(shape)
    quantized = quantize(model, [(x,)], rewrite_first=True)
    assert not transposed_convs(quantized)
    summary, (out,) = lower_and_run(phaseconv.rewrite(quantized), x)
    assert summary.partitions == 1 and not summary.outside, summary
    assert summary.inside["XNNConvert"] == 2, f"an fp32 island: {summary.inside}"
    assert snr_db(model(x), out) > 25


def test_dynamic_int8_graphs_are_left_alone_with_the_reason():
    torch.manual_seed(0)
    model, x = layer(nn.ConvTranspose2d(32, 16, 4, 2, padding=1), 8), torch.randn(1, 8, 6, 6)
    quantized = quantize(model, (x,), mode="dynamic")
    (decision,) = [d for d in phaseconv.explain(quantized) if d.rule == "conv_transpose"]
    assert not decision.applied and "dynamically quantized" in decision.reason
    with pytest.raises(PhaseconvError, match="dynamic"):
        quantize(model, (x,), mode="dynamic", rewrite_first=True)


def test_bad_calibration_data_is_named():
    model = layer(nn.ConvTranspose1d(32, 16, 8, 4, padding=2), 16)
    x = torch.randn(1, 16, 20)
    with pytest.raises(PhaseconvError, match="no calibration inputs"):
        quantize(model, [])
    with pytest.raises(PhaseconvError, match=r"calibration set 2, input 1: \[1, 16, 21\]"):
        quantize(model, [(x,), (torch.randn(1, 16, 21),)])
    with pytest.raises(PhaseconvError, match="has 2 inputs; the program takes 1"):
        quantize(torch.export.export(model, (x,)), [(x, x)])
    with pytest.raises(PhaseconvError, match="cannot export the model with calibration set 1"):
        quantize(model, [(x, x)])
    with pytest.raises(PhaseconvError, match="unknown quantization mode"):
        quantize(model, (x,), mode="int4")


def test_snr():
    signal = torch.ones(100)
    assert snr_db(signal, signal) == float("inf")
    assert snr_db(signal, signal * 1.1) == pytest.approx(20.0)
