"""winograd and im2col on a 1-D convolution that reads NCHW data (the program's input, a view of it,
or a conv2d on a [N, C, T, 1] input): its input is padded as [N, C, T], and transposed once for
all the ops that read it."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.rules import TARGET_RULES
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import assert_close, export, run

aten = torch.ops.aten

CASES = {
    "winograd, a convolution alone": (nn.Conv1d(64, 32, 3, padding=1), "winograd"),
    "im2col, a convolution alone": (nn.Conv1d(64, 32, 5, padding=2), "im2col"),
    "winograd, conv2d on [N, C, T, 1]": (nn.Conv2d(64, 32, (3, 1), padding=(1, 0)), "winograd"),
    "im2col, conv2d on [N, C, T, 1]": (nn.Conv2d(64, 32, (5, 1), padding=(2, 0)), "im2col"),
    "winograd, a chain's first": (
        nn.Sequential(nn.Conv1d(64, 64, 3, padding=1), nn.ELU(), nn.Conv1d(64, 32, 1)),
        "winograd",
    ),
    "im2col, a chain's first": (  # 16 output channels: not winograd's
        nn.Sequential(nn.Conv1d(64, 16, 5, padding=2), nn.ELU(), nn.Conv1d(16, 32, 1)),
        "im2col",
    ),
    "winograd in chunks, a convolution alone": (nn.Conv1d(64, 64, 7, padding=3), "winograd"),
    "winograd on a grid, a chain's first": (
        nn.Sequential(nn.Conv1d(64, 64, 3, padding=3, dilation=3), nn.ELU(), nn.Conv1d(64, 32, 1)),
        "winograd",
    ),
}
# On a grid the two outputs of a tile are rows d apart: the interleave moves rows of C values once.
GRID_INTERLEAVE = {"winograd on a grid, a chain's first": 1}


@pytest.mark.parametrize("name", CASES)
def test_padded_in_3d_transposed_once_and_exact(name):
    module, rule = CASES[name]
    x = torch.randn(1, 64, 37, 1) if isinstance(module, nn.Conv2d) else torch.randn(1, 64, 37)
    ep = export(module, x)
    rewritten = phaseconv.rewrite(ep, TARGET_RULES["x86-fma3"])
    pads = [n.args[0].meta["val"].dim() for n in rewritten.graph.nodes if n.target == aten.constant_pad_nd.default]
    assert pads == [3], pads  # a pad of NCHW [N, C, T, 1] copies one element per row in XNNPACK

    lowered = phaseconv.lower(ep, target="x86-fma3")
    assert any(d.rule == rule and d.applied for d in lowered.decisions), lowered.decisions
    assert lowered.summary.partitions == 1 and not lowered.summary.outside, lowered.summary
    transposes = 2 + GRID_INTERLEAVE.get(name, 0)  # into NHWC once, out once
    assert lowered.summary.inside["XNNStaticTranspose"] <= transposes, lowered.summary
    assert_close(LoadedProgram(lowered.buffer).run((x,))[0], run(ep, x))
