"""Transposed convolutions of dynamic length: one program for every length of the declared range."""

import pytest
import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.errors import PhaseconvError
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import decisions_of, lower_and_run, transposed_convs


class Trimmed(nn.Module):
    """A causal streaming-style deconvolution: the last k - s outputs trimmed by a slice."""

    def __init__(self, layer: nn.ConvTranspose1d, start: int, end: int):
        super().__init__()
        self.layer, self.start, self.end = layer, start, end

    def forward(self, x):
        return self.layer(x)[..., self.start : -self.end]


CASES = {
    # name: (layer, channels, shortest, example, longest)
    "hifigan-k16-s8-p4": (nn.ConvTranspose1d(32, 16, 16, 8, padding=4), 32, 1, 12, 90),
    "dac-k10-s5-p3-op1": (nn.ConvTranspose1d(32, 16, 10, 5, padding=3, output_padding=1), 32, 1, 12, 90),
    "encodec-k16-s8-p0": (nn.ConvTranspose1d(32, 16, 16, 8), 32, 2, 12, 90),
    "seanet-causal-trim": (Trimmed(nn.ConvTranspose1d(32, 16, 12, 6), 0, 6), 32, 1, 12, 90),
    "trim-both-ends": (Trimmed(nn.ConvTranspose1d(32, 16, 8, 4), 3, 1), 32, 1, 12, 90),
    "mimi-depthwise-k4-s2-p1": (nn.ConvTranspose1d(32, 32, 4, 2, padding=1, groups=32, bias=False), 32, 1, 12, 90),
}


def dynamic_program(name):
    torch.manual_seed(0)
    layer, channels, shortest, example, longest = CASES[name]
    ep = torch.export.export(
        layer.eval(),
        (torch.randn(1, channels, example),),
        dynamic_shapes=({2: Dim("frames", min=shortest, max=longest)},),
    )
    return layer, ep, channels, (shortest, 7, example + 1, longest)


@pytest.mark.parametrize("name", list(CASES))
def test_one_program_is_exact_at_every_length(name):
    layer, ep, channels, lengths = dynamic_program(name)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "conv_transpose"]
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    assert not transposed_convs(rewritten)
    assert rewritten.range_constraints == ep.range_constraints
    buffer = to_xnnpack(rewritten).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    program = LoadedProgram(buffer)
    for length in lengths:  # the shortest, odd ones, past the example, the longest
        x = torch.randn(1, channels, length)
        with torch.no_grad():
            expected = layer(x)
        (out,) = program.run((x,))
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5, msg=f"length {length}")
    with pytest.raises(PhaseconvError, match=rf"input 1 has shape \[1, {channels}, {lengths[-1] + 1}\]; the program"):
        program.run((torch.randn(1, channels, lengths[-1] + 1),))


def test_a_crop_that_would_remain_is_declined_with_the_reason():
    layer = nn.ConvTranspose1d(8, 8, 7, 4, padding=1, output_padding=1).eval()  # output 4L + 1: not whole blocks
    ep = torch.export.export(layer, (torch.randn(1, 8, 10),), dynamic_shapes=({2: Dim("t", min=1, max=50)},))
    (decision,) = decisions_of("conv_transpose", ep)
    assert not decision.applied and "XNNPACK slices only static shapes" in decision.reason


def test_stock_lowering_runs_over_the_whole_declared_range():
    """Lowering used to narrow the range to 2x the example (a fake-convolution kernel heuristic's guard,
    256 * T <= 20480), so the program failed at 90 steps though declared up to 200."""
    layer = nn.ConvTranspose1d(256, 128, 16, 8).eval()
    ep = torch.export.export(layer, (torch.randn(1, 256, 40),), dynamic_shapes=({2: Dim("T", min=2, max=200)},))
    for rewrite in (False, True):
        program = phaseconv.rewrite(ep) if rewrite else ep
        for length in (90, 200):
            x = torch.randn(1, 256, length)
            summary, (out,) = lower_and_run(program, x)
            torch.testing.assert_close(out, layer(x), rtol=1e-4, atol=1e-4)
