"""im2col: a stride-1 convolution as its shifted input windows, concatenated, and one 1x1 convolution."""

import pytest
import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.rules.im2col import Im2colRule, window_weight
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten
WITH_IM2COL = [*phaseconv.rules.DEFAULT_RULES, Im2colRule()]


def kernels(ep) -> list[tuple[int, ...]]:
    convs = (aten.conv1d.default, aten.conv2d.default)
    return [tuple(n.args[1].meta["val"].shape[2:]) for n in ep.graph.nodes if n.target in convs]


def test_window_weight_puts_each_tap_s_channels_together():
    """W'[o, tap*C + c] = W[o, c, tap], taps in row-major order."""
    w = torch.randn(5, 3, 2, 4)
    flat = window_weight(w)
    assert flat.shape == (5, 2 * 4 * 3, 1, 1)
    for tap, (u, v) in enumerate((u, v) for u in range(2) for v in range(4)):
        torch.testing.assert_close(flat[:, tap * 3 : (tap + 1) * 3, 0, 0], w[:, :, u, v], rtol=0, atol=0)


CASES = {
    "1-D k7 dilated, padded": (nn.Conv1d(64, 96, 7, padding=9, dilation=3), (1, 64, 50)),
    "1-D k2, no padding, no bias": (nn.Conv1d(64, 128, 2, bias=False), (2, 64, 33)),
    "2-D 3x3": (nn.Conv2d(64, 32, 3, padding=1), (1, 64, 12, 10)),
    "2-D unequal kernel, padding and dilation": (
        nn.Conv2d(64, 16, (3, 2), padding=(2, 1), dilation=(2, 1)),
        (1, 64, 9, 8),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_same_values_in_eager_and_through_the_runtime(name):
    module, shape = CASES[name]
    x = torch.randn(shape)
    ep = export(nn.Sequential(nn.ReLU(), module), x)
    (decision,) = decisions_of("im2col", ep, WITH_IM2COL)
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep, WITH_IM2COL)
    assert all(k == (1,) * len(k) for k in kernels(rewritten)), kernels(rewritten)
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_phaseconv_lower_for_this_host_takes_it_for_a_lifted_1d_chain():
    """After lift_1d the convolutions are conv2d on [N, C, T, 1]: the windows slice the time axis."""
    x = torch.randn(1, 64, 40)
    module = nn.Sequential(nn.Conv1d(64, 64, 5, padding=2), nn.ELU(), nn.Conv1d(64, 16, 7, padding=3))
    ep = export(module, x)
    lowered = phaseconv.lower(ep, target="x86-fma3")  # 16 output channels: not Winograd's
    applied = {d.rule for d in lowered.decisions if d.rule in ("winograd", "im2col") and d.applied}
    assert applied == {"winograd", "im2col"} and lowered.summary.partitions == 1, lowered.decisions
    assert sum(n for kind, n in lowered.summary.inside.items() if kind.startswith("XNNConcatenate")) >= 1
    from phaseconv.runtimes.executorch import LoadedProgram

    assert_close(LoadedProgram(lowered.buffer).run((x,))[0], run(ep, x))


@pytest.mark.parametrize(
    "module, shape, reason",
    [
        (nn.Conv1d(64, 64, 3, groups=2), (1, 64, 30), "grouped convolution (2 groups)"),
        (nn.Conv1d(64, 64, 4, stride=2), (1, 64, 30), "stride [2]"),
        (nn.Conv1d(32, 64, 3), (1, 32, 30), "32 input channels"),
        (nn.Conv2d(64, 8, 5, padding=2), (1, 64, 8, 8), "25 taps"),
        (nn.Conv1d(64, 64, 3).half(), (1, 64, 30), "torch.float16 convolution"),
        (nn.Conv1d(512, 64, 7), (1, 512, 4000), "MiB of windows"),
    ],
    ids=["grouped", "strided", "narrow", "many-taps", "fp16", "large-windows"],
)
def test_declines_say_why(module, shape, reason):
    x = torch.randn(shape, dtype=next(module.parameters()).dtype)
    (decision,) = decisions_of("im2col", export(module, x), WITH_IM2COL)
    assert not decision.applied and reason in decision.reason, decision


def test_a_dynamic_length_is_declined():
    x = torch.randn(1, 64, 30)
    ep = export(nn.Conv1d(64, 64, 3), x, dynamic_shapes=({2: Dim("t", min=4, max=100)},))
    (decision,) = decisions_of("im2col", ep, WITH_IM2COL)
    assert not decision.applied and "dynamic size" in decision.reason


def test_pointwise_convolutions_are_no_candidates():
    assert decisions_of("im2col", export(nn.Conv1d(64, 64, 1), torch.randn(1, 64, 30)), WITH_IM2COL) == []
