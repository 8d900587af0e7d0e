"""winograd: convolutions of 2-3 taps per axis (or 4-11 in 1-D, in chunks) as F(2, r): strided depthwise
transforms, GEMMs, sums."""

import re

import pytest
import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.rules.winograd import WinogradRule
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten
WITH_WINOGRAD = [*phaseconv.rules.DEFAULT_RULES, WinogradRule(min_channels=8, min_long_channels=8)]
AS_DEFAULT = [*phaseconv.rules.DEFAULT_RULES, WinogradRule()]


class ResidualUnit(nn.Module):
    """SEANet's unit: ELU, a causal 3-tap conv, ELU, a 1x1 conv, the skip."""

    def __init__(self, channels=16):
        super().__init__()
        self.wide = nn.Conv1d(channels, channels, 3)
        self.pointwise = nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        y = self.wide(nn.functional.pad(nn.functional.elu(x), [2, 0]))
        return x + self.pointwise(nn.functional.elu(y))


CASES = {
    "3 taps, padded, odd length": (nn.Conv1d(16, 24, 3, padding=1), (1, 16, 21)),
    "2 taps (a polyphase convolution), no bias": (nn.Conv1d(16, 32, 2, bias=False), (2, 16, 12)),
    "a lifted residual unit": (ResidualUnit(), (1, 16, 30)),
    "2-D 3x3, padded, odd sizes": (nn.Conv2d(16, 8, 3, padding=1), (1, 16, 9, 7)),
    "2-D 2x3, no padding": (nn.Conv2d(16, 8, (2, 3)), (2, 16, 6, 8)),
    "2-D 3x3, stride 2, padded": (nn.Conv2d(8, 16, 3, 2, 1), (1, 8, 12, 10)),
    "3 taps, stride 2, odd length": (nn.Conv1d(16, 16, 3, 2, 1), (1, 16, 21)),
    "4 taps, stride 2, the input's last sample unread": (nn.Conv1d(16, 16, 4, 2), (1, 16, 21)),
    "2-D 3x3, strides 2 and 1": (nn.Conv2d(8, 16, 3, (2, 1)), (1, 8, 9, 8)),
    "7 taps (chunks of 3, 3, 1), padded, odd length": (nn.Conv1d(16, 24, 7, padding=3), (1, 16, 21)),
    "11 taps (3, 3, 3, 2), no bias": (nn.Conv1d(16, 16, 11, bias=False), (2, 16, 30)),
    "4 taps (3, 1), lifted after an ELU": (nn.Sequential(nn.ELU(), nn.Conv1d(16, 16, 4, padding=2)), (1, 16, 17)),
    "3 taps, dilation 3 (a grid of 3 columns)": (nn.Conv1d(16, 16, 3, padding=3, dilation=3), (1, 16, 20)),
    "7 taps, dilation 5, 23 outputs (HiFi-GAN's)": (nn.Conv1d(16, 8, 7, padding=15, dilation=5), (1, 16, 23)),
}


@pytest.mark.parametrize("name", CASES)
def test_same_values_in_eager_and_through_the_runtime(name):
    module, shape = CASES[name]
    x = torch.randn(shape)
    ep = export(module, x)
    applied = [d for d in decisions_of("winograd", ep, WITH_WINOGRAD) if d.applied]
    assert len(applied) == 1 and "F(2, " in applied[0].detail, applied
    rewritten = phaseconv.rewrite(ep, WITH_WINOGRAD)
    assert_close(run(rewritten, x), run(ep, x))
    summary, _ = assert_one_partition_matching(rewritten, ep, x)
    points = int(re.search(r": (\d+) GEMMs", applied[0].detail).group(1))
    chunked = re.search(r"\((\d+) input transforms", applied[0].detail)
    transforms = int(chunked.group(1)) if chunked else points  # one per point, unless chunks share them
    assert summary.inside["XNNDepthwiseConv2d"] == transforms


@pytest.mark.parametrize(
    "conv, shape, kernels, slices",
    [
        (nn.Conv2d(16, 16, 3, padding=1), (1, 16, 12, 10), {(2, 2)}, 3),  # offsets 0 or 1 on each axis
        (nn.Conv2d(16, 16, (2, 3)), (1, 16, 7, 10), {(1, 2), (2, 2)}, 3),  # 2 taps: rows {0, 1}, {1}, {1, 2}
        (nn.Conv1d(16, 16, 3, padding=1), (1, 16, 12), {(4, 1)}, 0),  # 4 taps: one pass as it is
    ],
    ids=["3x3", "2x3", "1-D"],
)
def test_a_2d_point_reads_only_its_nonzero_taps(conv, shape, kernels, slices):
    ep = export(conv, torch.randn(shape))
    graph = phaseconv.rewrite(ep, WITH_WINOGRAD).graph
    depthwise = [n for n in graph.nodes if n.target == aten.conv2d.default and n.args[-1] == 16]
    assert {tuple(n.args[1].meta["val"].shape[2:]) for n in depthwise} == kernels
    assert sum(n.target == aten.slice.Tensor for n in graph.nodes) == slices


def test_phaseconv_lower_for_x86_fma3_prefers_it_to_im2col():
    x = torch.randn(1, 128, 40)
    taken = [nn.Conv1d(128, 128, 3, padding=1), nn.ELU(), nn.Conv1d(128, 128, 7, padding=3)]
    dilated, narrow = nn.Conv1d(128, 128, 7, padding=6, dilation=2), nn.Conv1d(128, 16, 7, padding=3)
    module = nn.Sequential(*taken, dilated, narrow)
    lowered = phaseconv.lower(export(module, x), target="x86-fma3")
    applied = {d.node: d.rule for d in lowered.decisions if d.applied and d.rule in ("winograd", "im2col")}
    assert sorted(applied.values()) == ["im2col", *["winograd"] * 3], lowered.decisions  # 16 out: im2col
    from phaseconv.runtimes.executorch import LoadedProgram

    assert_close(LoadedProgram(lowered.buffer).run((x,))[0], run(export(module, x), x))


@pytest.mark.parametrize(
    "module, shape, reason",
    [
        (nn.Conv2d(16, 16, 3, dilation=2), (1, 16, 12, 12), "dilation [2, 2]: the grid view takes a 1-D kernel"),
        (nn.Conv1d(16, 16, 3, stride=2, dilation=2), (1, 16, 30), "dilation [2]: with a stride"),
        (nn.Conv1d(16, 16, 3, dilation=4), (1, 16, 12), "4 outputs: one per grid column"),
        (nn.Conv1d(16, 16, 2, stride=2), (1, 16, 30), "stride [2] as large as the kernel"),
        (nn.Conv1d(16, 16, 3, groups=2), (1, 16, 30), "grouped convolution (2 groups)"),
        (nn.Conv1d(16, 4, 3), (1, 16, 30), "16 -> 4 channels"),
        (nn.Conv1d(16, 16, 3).half(), (1, 16, 30), "torch.float16 convolution"),
        (nn.Conv1d(16, 16, 2), (1, 16, 2), "a single output"),
        (nn.Conv2d(16, 16, (3, 5)), (1, 16, 8, 8), "[3, 5] taps, stride [1, 1]: chunks of 3 are for 1-D kernels"),
        (nn.Conv1d(16, 16, 7, stride=2), (1, 16, 30), "[4] taps, stride [2]: chunks of 3 are for 1-D kernels"),
    ],
    ids=[
        *("dilated 2-D", "dilated strided", "dilated short", "strided", "grouped", "narrow", "fp16", "one-output"),
        *("2-D long", "strided long"),
    ],
)
def test_declines_say_why(module, shape, reason):
    x = torch.randn(shape, dtype=next(module.parameters()).dtype)
    (decision,) = decisions_of("winograd", export(module, x), WITH_WINOGRAD)
    assert not decision.applied and reason in decision.reason, decision


def test_a_dynamic_length_of_any_parity_is_declined():
    x = torch.randn(1, 16, 30)
    ep = export(nn.Conv1d(16, 16, 3), x, dynamic_shapes=({2: Dim("t", min=4, max=100)},))
    (decision,) = decisions_of("winograd", ep, WITH_WINOGRAD)
    assert not decision.applied and "not known to be even" in decision.reason


@pytest.mark.slow  # 16 s: one lowering run at every length of its range
def test_an_even_dynamic_length_runs_in_one_partition_at_every_length():
    """Whole tiles at every length: no crop of run-time length, which XNNPACK would leave outside."""
    x = torch.randn(1, 16, 40)
    module = ResidualUnit()
    ep = export(module, x, dynamic_shapes=({2: 2 * Dim("t", min=2, max=100)},))
    assert [d.applied for d in decisions_of("winograd", ep, WITH_WINOGRAD)] == [True]
    buffer = to_xnnpack(phaseconv.rewrite(ep, WITH_WINOGRAD)).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside and summary.inside["XNNDepthwiseConv2d"] == 4, summary
    program = LoadedProgram(buffer)
    for length in (4, 40, 198, 200):  # the shortest, the example, and the longest (memory planned for it)
        x = torch.randn(1, 16, length)
        assert_close(program.run((x,))[0], module(x))


@pytest.mark.parametrize(
    "conv", [nn.Conv1d(32, 32, 4, padding=2), nn.Conv1d(32, 32, 4, padding=3, dilation=2)], ids=["4 taps", "dilated"]
)
def test_chunks_and_grids_take_64_channels_by_default(conv):
    (decision,) = decisions_of("winograd", export(conv, torch.randn(1, 32, 40)), [WinogradRule()])
    assert not decision.applied and "32 -> 32 channels: the transforms in chunks or a grid" in decision.reason


FOLDED = {
    "32 channels, 7 taps, padded, odd length": (nn.Conv1d(32, 32, 7, padding=3), (1, 32, 41)),
    "32 -> 48, 11 taps, batch 2": (nn.Conv1d(32, 48, 11, padding=5), (2, 32, 40)),
    "48 -> 32, 5 taps, no padding, no bias (F(2, 3) after the fold)": (nn.Conv1d(48, 32, 5, bias=False), (1, 48, 30)),
    "lifted after an ELU, 3 outputs": (nn.Sequential(nn.ELU(), nn.Conv1d(32, 32, 7)), (1, 32, 9)),
    "7 taps, dilation 3 (on the grid)": (nn.Conv1d(32, 32, 7, padding=9, dilation=3), (1, 32, 40)),
    "11 taps, dilation 5, 37 outputs": (nn.Conv1d(32, 32, 11, padding=23, dilation=5), (1, 32, 41)),
    "2-D, 7x1, padded on both axes": (nn.Conv2d(32, 32, (7, 1), padding=(3, 1)), (1, 32, 20, 5)),
}


@pytest.mark.parametrize("name", FOLDED)
def test_narrow_long_kernels_are_folded_in_time_then_transformed(name):
    """32-63 channels, 5-11 taps: two input phases to two output phases on channels, then F(2, r)."""
    module, shape = FOLDED[name]
    x = torch.randn(shape)
    ep = export(module, x)
    (decision,) = decisions_of("winograd", ep, AS_DEFAULT)
    conv = module[-1] if isinstance(module, nn.Sequential) else module
    c, o = conv.in_channels, conv.out_channels
    channels = f"{c} -> {o} channels as {2 * c} -> {2 * o}"
    assert decision.applied and f"time folded by 2 ({channels}), then F(2, " in decision.detail, decision
    rewritten = phaseconv.rewrite(ep, AS_DEFAULT)
    assert_close(run(rewritten, x), run(ep, x))
    summary, _ = assert_one_partition_matching(rewritten, ep, x)
    chunked = re.search(r"\((\d+) input transforms", decision.detail)
    points = int(re.search(r": (\d+) GEMMs", decision.detail).group(1))
    assert summary.inside["XNNDepthwiseConv2d"] == (int(chunked.group(1)) if chunked else points)


@pytest.mark.parametrize(
    "conv, shape, reason",
    [
        (nn.Conv1d(32, 32, 3, padding=1), (1, 32, 30), "F(2, 3): 4 GEMMs"),  # short: transformed as it is
        (nn.Conv1d(16, 32, 7), (1, 16, 30), "16 -> 32 channels"),  # folds to 32: still too narrow
        (nn.Conv1d(32, 32, 7, 2), (1, 32, 30), "chunks of 3 are for 1-D kernels, stride 1"),
        (nn.Conv1d(32, 32, 5, stride=2), (1, 32, 30), "stride [2]: input phases on channels"),
        (nn.Conv1d(32, 32, 7), (1, 32, 8), "a single output"),  # 2 outputs: one folded, no tile of two
        (nn.Conv1d(64, 64, 7, padding=3), (1, 64, 30), "F(2, 7): 4 GEMMs"),  # wide enough for the chunks
        (nn.Conv1d(64, 32, 5), (1, 64, 30), "64 -> 32 channels"),  # not measured folded: left to im2col
    ],
    ids=["3 taps", "16 channels", "strided long", "strided 5 taps", "2 outputs", "64 channels", "64 -> 32"],
)
def test_what_is_not_folded(conv, shape, reason):
    (decision,) = decisions_of("winograd", export(conv, torch.randn(shape)), [WinogradRule()])
    assert "time folded" not in (decision.detail or "") and reason in (decision.detail or decision.reason), decision


def test_a_dynamic_length_on_a_long_kernel_is_declined():
    x = torch.randn(1, 16, 40)
    ep = export(nn.Conv1d(16, 16, 7, padding=3), x, dynamic_shapes=({2: 2 * Dim("t", min=4, max=100)},))
    (decision,) = decisions_of("winograd", ep, WITH_WINOGRAD)
    assert not decision.applied and "a dynamic length on more than 3 taps" in decision.reason


def test_other_kernels_are_no_candidates():
    for conv in (nn.Conv1d(16, 16, 1), nn.Conv1d(16, 16, 13), nn.Conv2d(16, 16, (3, 13))):
        x = torch.randn(1, 16, 20) if isinstance(conv, nn.Conv1d) else torch.randn(1, 16, 20, 20)
        assert decisions_of("winograd", export(conv, x), WITH_WINOGRAD) == []


def test_phaseconv_lower_for_x86_avx512_takes_only_wide_stride_1_2d_kernels():
    """A 3x3 convolution of 128 channels in and out is taken; a strided one, a narrower one and a
    1-D one are left to XNNPACK's convolution, each with its reason; the program stays exact."""

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.wide = nn.Conv2d(128, 128, 3, padding=1)
            self.strided = nn.Conv2d(128, 128, 3, 2, 1)
            self.narrow = nn.Conv2d(128, 64, 3, padding=1)
            self.one_d = nn.Conv1d(64, 64, 3, padding=1)

        def forward(self, x):
            y = self.narrow(self.strided(self.wide(x)))
            return self.one_d(y.flatten(2))

    module, x = Mixed(), torch.randn(1, 128, 12, 12)
    lowered = phaseconv.lower(export(module, x), target="x86-avx512")
    winograd = [d for d in lowered.decisions if d.rule == "winograd"]
    assert [d.applied for d in winograd] == [True, False, False, False], winograd
    reasons = [d.reason for d in winograd[1:]]
    assert "stride [2, 2]: this target takes stride-1 2-D kernels only" in reasons[0]
    assert "128 -> 64 channels" in reasons[1]
    assert "this target takes stride-1 2-D kernels only" in reasons[2]
    assert_close(LoadedProgram(lowered.buffer).run((x,))[0], run(export(module, x), x))


@pytest.mark.parametrize(
    ("channels", "size", "applied"),
    [(128, 128, True), (128, 130, False), (256, 130, True)],
)
def test_x86_avx512_takes_large_outputs_only_from_256_channels(channels, size, applied):
    """Beyond 128x128 outputs the x86-avx512 target wants 256 channels in and out (SD 1.x's VAE
    decoder: its 128-channel 3x3 convolutions at 256x256 ran slower as F(2, 3x3)); up to it, 128."""
    module = nn.Conv2d(channels, channels, 3, padding=1)
    program = export(module, torch.randn(1, channels, size, size))
    (winograd,) = decisions_of("winograd", program, phaseconv.rules.TARGET_RULES["x86-avx512"])
    assert winograd.applied == applied, winograd
    if not applied:
        assert winograd.reason.startswith(f"{channels} -> {channels} channels at {size}x{size} outputs: beyond 16384")
