"""Nearest upsampling -> replicate + interleave, against eager and through the runtime."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, export, lower_and_run, run


class Upsample(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(x, mode="nearest", **self.kwargs)


CASES = {
    "1d-x2": ((1, 3, 7), {"scale_factor": 2}),
    "1d-x3": ((2, 3, 5), {"scale_factor": 3}),
    "2d-x2": ((1, 4, 6, 5), {"scale_factor": 2}),
    "2d-x4": ((1, 2, 3, 3), {"scale_factor": 4}),
    "2d-unequal": ((1, 2, 4, 5), {"scale_factor": (3, 2)}),
    "2d-one-dim": ((1, 2, 4, 5), {"scale_factor": (1, 2)}),
    "2d-size": ((2, 3, 4, 6), {"size": (12, 12)}),
    "3d-x2": ((1, 2, 3, 2, 4), {"scale_factor": 2}),
}


@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("name", list(CASES))
def test_integer_upsample_is_replicate_and_interleave(name, decompose):
    shape, kwargs = CASES[name]
    x = torch.randn(shape)
    ep = export(Upsample(**kwargs), x, decompose=decompose)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "nearest_upsample"]
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    assert not any("upsample" in str(n.target) for n in rewritten.graph.nodes)
    assert torch.equal(run(rewritten, x), run(ep, x)), "a nearest upsample copies values: bit exact"


@pytest.mark.parametrize("name", ["1d-x2", "2d-x2", "2d-unequal", "2d-size"])
def test_upsample_through_the_runtime_in_one_partition(name):
    shape, kwargs = CASES[name]
    x = torch.randn(shape)
    ep = export(Upsample(**kwargs), x)
    summary, (out,) = lower_and_run(phaseconv.rewrite(ep), x)
    assert summary.partitions == 1 and not summary.outside, summary
    assert torch.equal(out, run(ep, x))


class ConvUpConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.b(F.interpolate(self.a(x), scale_factor=2))


def test_conv_upsample_conv_is_one_partition():
    x = torch.randn(1, 4, 8, 8)
    ep = export(ConvUpConv(), x)
    stock = summarize_pte(to_xnnpack(ep).buffer)
    assert stock.partitions == 2 and stock.outside, "stock splits the delegate at the upsample"
    summary, (out,) = lower_and_run(phaseconv.rewrite(ep), x)
    assert summary.partitions == 1 and not summary.outside, summary
    torch.testing.assert_close(out, run(ep, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("shape", "kwargs", "words"),
    [
        ((1, 2, 5), {"scale_factor": 2.004}, "PyTorch's index arithmetic"),
        ((1, 2, 6, 6), {"scale_factor": 1.5}, "not an integer multiple"),
        ((1, 2, 6, 6), {"size": (6, 6)}, "scale 1"),
    ],
    ids=["2.004", "1.5", "scale-1"],
)
def test_non_integer_scales_are_declined(shape, kwargs, words):
    x = torch.randn(shape)
    ep = export(Upsample(**kwargs), x)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "nearest_upsample"]
    assert not decision.applied and words in decision.reason, decision
    torch.testing.assert_close(run(phaseconv.rewrite(ep), x), run(ep, x), rtol=0, atol=0)


def test_quantized_conv_upsample_conv_is_one_int8_partition():
    """PT2E with the XNNPACK quantizer: the copies keep the input's quantization, so nothing but the
    program's own input and output is converted between int8 and float."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    x = torch.randn(1, 4, 8, 8)
    module = torch.export.export(ConvUpConv().eval(), (x,)).module()
    prepared = prepare_pt2e(module, XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    prepared(x)
    ep = torch.export.export(convert_pt2e(prepared), (x,))
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "nearest_upsample"]
    assert decision.applied and "int8" in decision.detail
    rewritten = phaseconv.rewrite(ep)
    assert torch.equal(run(rewritten, x), run(ep, x)), "the same int8 values, copied"
    summary, (out,) = lower_and_run(rewritten, x)
    assert summary.partitions == 1 and not summary.outside, summary
    assert summary.inside["XNNConvert"] == 2, "only the program input and output change representation"
    torch.testing.assert_close(out, run(ep, x), rtol=0, atol=0.05)


class DynamicUpsample(nn.Module):
    """conv, nearest x2, conv: one dynamic size (the length, or an image's height)."""

    def __init__(self, spatial: int):
        super().__init__()
        conv = nn.Conv1d if spatial == 1 else nn.Conv2d
        self.a, self.b = conv(4, 4, 3, padding=1), conv(4, 4, 3, padding=1)

    def forward(self, x):
        return self.b(nn.functional.interpolate(self.a(x), scale_factor=2, mode="nearest"))


@pytest.mark.parametrize("shape", [(1, 4, 10), (1, 4, 6, 8)], ids=["1d-length", "2d-height"])
def test_nearest_upsample_of_a_dynamic_size_is_one_partition_and_exact_over_the_range(shape):
    from torch.export import Dim

    from phaseconv.runtimes.executorch import LoadedProgram

    module = DynamicUpsample(len(shape) - 2)
    ep = export(module, torch.randn(shape), dynamic_shapes=({2: Dim("t", min=1, max=24)},))
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "nearest_upsample"]
    assert decision.applied, decision
    buffer = to_xnnpack(phaseconv.rewrite(ep)).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    program = LoadedProgram(buffer)
    for length in (1, 7, 24):
        x = torch.randn(*shape[:2], length, *shape[3:])
        (out,) = program.run((x,))
        assert_close(out, run(ep, x))
