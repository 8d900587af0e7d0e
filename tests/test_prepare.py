"""phaseconv.prepare: weight_norm baked, transformers' tensor-valued conv settings made static."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.models import transformers_audio
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import TINY_MIMI, assert_close, export, lower_and_run, run, transposed_convs


class WeightNormed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.utils.parametrizations.weight_norm(nn.ConvTranspose1d(4, 4, 8, 4))
        self.conv = nn.utils.weight_norm(nn.Conv1d(4, 2, 3, padding=1))  # the older, hook-based form

    def forward(self, x):
        return self.conv(self.up(x))


def test_weight_norm_is_baked_and_the_original_untouched():
    model, x = WeightNormed().eval(), torch.randn(1, 4, 6)
    prepared = phaseconv.prepare(model)
    assert not any(nn.utils.parametrize.is_parametrized(m) for m in prepared.modules())
    assert not hasattr(prepared.conv, "weight_g")
    assert nn.utils.parametrize.is_parametrized(model.up) and hasattr(model.conv, "weight_g")
    with torch.no_grad():
        torch.testing.assert_close(prepared(x), model(x), rtol=0, atol=0)
    ep = export(prepared, x)
    summary = summarize_pte(to_xnnpack(phaseconv.rewrite(ep)).buffer)
    assert summary.partitions == 1 and not summary.outside, "constant weights: every conv delegated"


def test_prepare_rejects_what_is_not_a_module():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        phaseconv.prepare("model.pt2")


@pytest.fixture(scope="module")
def mimi():
    pytest.importorskip("transformers")
    model, (latents,) = transformers_audio.mimi_latents_decoder(2, **TINY_MIMI)
    return model, latents


def test_mimi_without_prepare_has_data_dependent_lengths(mimi):
    model, latents = mimi
    decisions = phaseconv.explain(export(model, latents))
    declined = [d for d in decisions if d.rule == "conv_transpose" and not d.applied]
    assert declined and all("no known range (computed from the data?)" in d.reason for d in declined)


@pytest.mark.slow  # 26 s: a whole decoder lowered; test_real_models lowers Mimi prepared by default
def test_mimi_prepared_lowers_with_every_deconvolution_rewritten(mimi):
    model, latents = mimi
    prepared = phaseconv.prepare(model)
    with torch.no_grad():
        torch.testing.assert_close(prepared(latents), model(latents), rtol=0, atol=0)
    ep = export(prepared, latents)
    rewritten = phaseconv.rewrite(ep)
    assert transposed_convs(rewritten) == [], phaseconv.explain(ep)
    summary, (audio,) = lower_and_run(rewritten, latents)
    assert summary.inside["XNNConvTranspose2d"] == 0 and "aten::elu.out" not in summary.outside
    expected = run(ep, latents)
    assert_close(audio, expected, scale=float(expected.abs().max()))
    assert float((audio - expected).abs().max()) * 32768 < 1, "within one 16-bit PCM step"
