"""phaseconv.quantize's fp32 operators: named submodules (keep_float), positions and rotary embeddings stay
fp32 between int8 neighbours, one partition."""

import copy

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.errors import PhaseconvError
from phaseconv.graph.quantized import QUANTIZE
from phaseconv.quantize import quantize, snr_db
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import STATE_WRITES, decisions_of, lower_and_run, run
from tests.rules.test_interleaved_rope import apply_rope

aten = torch.ops.aten


class Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3, padding=1)

    def forward(self, x):
        return x + self.conv(torch.relu(x))


def model() -> nn.Module:
    """conv -> deconv -> residual block -> conv, as a decoder's last stage."""
    return nn.Sequential(
        nn.Conv1d(8, 16, 3, padding=1), nn.ConvTranspose1d(16, 16, 8, 4, padding=2), Block(16), nn.Conv1d(16, 1, 3)
    ).eval()


def conv_weights(ep) -> dict[str, torch.dtype]:
    """For each convolution, the module it comes from -> whether its weight is dequantized in the graph."""
    convs = [n for n in ep.graph.nodes if n.target == aten.conv1d.default or n.target == aten.conv2d.default]
    return {list(n.meta["nn_module_stack"].values())[-1][0]: n.args[1].op == "call_function" for n in convs}


def test_kept_module_stays_fp32_and_lowers_to_one_partition():
    torch.manual_seed(0)
    net, x = model(), torch.randn(1, 8, 24)
    calibration = [(torch.randn(1, 8, 24),) for _ in range(4)] + [(x,)]
    every = quantize(net, calibration)
    kept = quantize(net, calibration, keep_float="2")  # a string is one name
    assert all(conv_weights(phaseconv.rewrite(every)).values())
    assert conv_weights(phaseconv.rewrite(kept)) == {"0": True, "1": True, "2.conv": False, "3": True}
    summary, (out,) = lower_and_run(phaseconv.rewrite(kept), x)
    assert summary.partitions == 1
    expected = run(kept, x)
    output_step = [n for n in kept.graph.nodes if n.target == QUANTIZE][-1].args[1]
    torch.testing.assert_close(out, expected, rtol=0, atol=2 * output_step)
    with torch.no_grad():
        reference = net(x)
    assert snr_db(reference, expected) > snr_db(reference, run(every, x))


def test_unknown_module_is_named_with_close_matches():
    net, x = model(), torch.randn(1, 8, 24)
    with pytest.raises(PhaseconvError, match=r"no operator of the program comes from a module '2\.conf'.*2\.conv"):
        quantize(net, (x,), keep_float=["2.conf"])


class Join(nn.Module):
    def forward(self, a, b):
        return torch.cat([a, b], dim=-1)


class Joined(nn.Module):
    """Two convolutions joined by a kept module's cat; after it, ops that would share the cat's int8
    parameters (relu, reshape): they go fp32 with it."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.join = nn.Conv1d(8, 16, 3), nn.Conv1d(8, 16, 3), nn.Conv1d(16, 4, 1), Join()

    def forward(self, x):
        return self.c(torch.relu(self.join(self.a(x), self.b(x))).reshape(1, 16, -1))


def test_ops_sharing_int8_parameters_with_a_kept_module_stay_float_too():
    torch.manual_seed(0)
    net, x = Joined().eval(), torch.randn(1, 8, 20)
    kept = quantize(net, [(torch.randn(1, 8, 20),) for _ in range(3)], keep_float=["join"])
    summary, (out,) = lower_and_run(phaseconv.rewrite(kept), x)
    assert summary.partitions == 1
    output_step = [n for n in kept.graph.nodes if n.target == QUANTIZE][-1].args[1]
    torch.testing.assert_close(out, run(kept, x), rtol=0, atol=2 * output_step)


class RotatedStep(nn.Module):
    """A streaming step as pocket-tts's decoder attention has it: queries and keys rotated (Kyutai's
    RoPE) at the position a buffer holds, which each call advances by its steps."""

    def __init__(self, heads=4, width=16):
        super().__init__()
        self.heads, self.width = heads, width
        self.project, self.out = nn.Linear(heads * width, 2 * heads * width), nn.Linear(heads * width, 8)
        self.register_buffer("position", torch.zeros(1))

    def forward(self, x):
        b, t, _ = x.shape
        q, k = self.project(x).view(b, t, 2, self.heads, self.width).unbind(2)
        q, k = apply_rope(q, k, self.position)
        self.position.add_(float(t))
        return self.out((q * k).reshape(b, t, -1))


def test_positions_and_rotations_stay_fp32_past_the_calibrated_positions():
    """int8 would round the position counter to its calibrated scale and stop it at the last position
    calibration saw; the rotation would be requantized op by op. Both stay fp32: after 3 calls of
    calibration, 40 calls go on counting exactly and stay as close to fp32 as the first."""
    torch.manual_seed(0)
    net, steps = RotatedStep().eval(), 16
    calibration = [(torch.randn(1, steps, 64),) for _ in range(3)]
    quantized = quantize(net, calibration)
    calls = [torch.randn(1, steps, 64) for _ in range(40)]
    reference, module = copy.deepcopy(net), copy.deepcopy(quantized.module())
    with torch.no_grad():
        snrs = [snr_db(reference(x), module(x)) for x in calls]
    assert float(module.position) == 40 * steps
    assert min(snrs[3:]) > min(snrs[:3]) - 3, snrs
    quantized_ops = {n.args[0].target for n in quantized.graph.nodes if n.target == QUANTIZE}
    assert not quantized_ops & {aten.stack.default, aten.cos.default, aten.add.Tensor}, quantized_ops


def test_a_quantized_rotation_is_rewritten_at_lowering_in_one_partition():
    torch.manual_seed(0)
    x = torch.randn(1, 16, 64)
    quantized = quantize(RotatedStep().eval(), [(torch.randn(1, 16, 64),) for _ in range(3)] + [(x,)])
    decisions = decisions_of("interleaved_rope", quantized)
    assert len(decisions) == 2 and all(d.applied for d in decisions), decisions
    summary, (out,) = lower_and_run(phaseconv.rewrite(quantized), x)
    assert summary.partitions == 1 and set(summary.outside) <= STATE_WRITES, summary
    output_step = [n for n in quantized.graph.nodes if n.target == QUANTIZE][-1].args[1]
    torch.testing.assert_close(out, run(quantized, x), rtol=0, atol=2 * output_step)


def test_an_elu_between_int8_neighbours_stays_one_operator_run_by_xnnpack_in_int8():
    """A depthwise transposed convolution makes quantize rewrite first; the ELU stays an ELU, which
    XNNPACK runs between the int8 convolutions (no exp, no converts of its own)."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv1d(8, 16, 3), nn.ConvTranspose1d(16, 16, 4, 2, groups=16), nn.ELU(), nn.Conv1d(16, 8, 3)
    ).eval()
    x = torch.randn(1, 8, 24)
    quantized = quantize(net, [(torch.randn(1, 8, 24),) for _ in range(4)] + [(x,)])
    assert aten.elu.default in {n.target for n in quantized.graph.nodes}
    lowered = phaseconv.lower(quantized)
    assert lowered.summary.partitions == 1 and not lowered.summary.outside, lowered.summary
    assert lowered.summary.inside["XNNELU"] == 1 and "XNNExp" not in lowered.summary.inside, lowered.summary.inside
    (out,) = LoadedProgram(lowered.buffer).run((x,))
    output_step = [n for n in quantized.graph.nodes if n.target == QUANTIZE][-1].args[1]
    torch.testing.assert_close(out, run(quantized, x), rtol=0, atol=2 * output_step)
