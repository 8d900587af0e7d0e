"""diffusers' VAE decoder as built (AutoencoderKL, a small config of its architecture, random
weights): group norms, the nearest x2 upsampler and the middle block's attention all run inside one
XNNPACK partition after phaseconv, and the runtime's image is the model's."""

import pytest
import torch

import phaseconv
from phaseconv.models import diffusers_vae
from phaseconv.models.loading import load_model
from tests.helpers import assert_close, lower_and_run

pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def small_decoder():
    model, inputs = diffusers_vae.vae_decoder(latents=8, config=diffusers_vae.SMALL)
    with torch.no_grad():
        expected = model(*inputs)
    return torch.export.export(phaseconv.prepare(model), inputs), inputs, expected


def test_every_group_norm_and_upsample_is_rewritten(small_decoder):
    ep, _, _ = small_decoder
    applied = {}
    for decision in phaseconv.explain(ep):
        if decision.applied:
            applied[decision.rule] = applied.get(decision.rule, 0) + 1
    # the middle block: 2 resnets of 2 norms and its attention's; 2 up blocks of 2 resnets; the output's
    assert applied["group_norm"] == 5 + 8 + 1, applied
    # its x2 upsample and the 3x3 convolution after it: one transposed convolution, then polyphase
    assert applied["nearest_conv"] == 1 and applied["conv_transpose"] == 1, applied
    assert "nearest_upsample" not in applied, applied
    assert applied["attention"] == 1, applied


def test_lowers_to_one_partition_and_matches_the_model(small_decoder):
    ep, inputs, expected = small_decoder
    summary, (image,) = lower_and_run(phaseconv.rewrite(ep), *inputs)
    assert summary.partitions == 1 and summary.outside == {}, summary
    assert image.shape == (1, 3, 16, 16)  # two blocks: one x2 upsample
    assert_close(image, expected)


@pytest.mark.slow  # a second lowering, stock: what the rules change
def test_stock_leaves_the_group_norms_outside(small_decoder):
    ep, inputs, _ = small_decoder
    summary, _ = lower_and_run(ep, *inputs)
    assert summary.outside.get("aten::native_group_norm.out", 0) == 14, summary.outside


def test_built_in_names():
    source = load_model("diffusers:vae-decoder-small?latents=4")
    assert source.inputs[0].shape == (1, 4, 4, 4)
    with pytest.raises(phaseconv.PhaseconvError, match="diffusers:vae-decoder takes no argument 'frames'"):
        load_model("diffusers:vae-decoder?frames=3")
