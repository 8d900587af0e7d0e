"""One small model per family, module -> prepare -> export -> rewrite -> XNNPACK -> runtime.

Small configs of the real architectures (`transformers` and the project's image models), random
weights. Each checks: no transposed convolution left, what the delegate leaves outside, and the
runtime's output against the model as built, in eager PyTorch.
"""

import pytest
import torch

import phaseconv
from phaseconv.models import stylegan, transformers_audio, unet
from tests.helpers import TINY_DAC, TINY_MIMI, assert_close, lower_and_run, transposed_convs

pytest.importorskip("transformers")

FAMILIES = {
    "mimi latents": lambda: transformers_audio.mimi_latents_decoder(3, **TINY_MIMI),
    "mimi codes": lambda: transformers_audio.mimi_codes_decoder(3, **TINY_MIMI),
    "encodec": lambda: transformers_audio.encodec_decoder(
        0.002, hidden_size=16, num_filters=4, upsampling_ratios=[4, 2], codebook_dim=16, num_lstm_layers=1
    ),
    "dac": lambda: transformers_audio.dac_decoder(0.05, **TINY_DAC),
    "hifigan": lambda: transformers_audio.hifigan(
        6,
        model_in_dim=8,
        upsample_initial_channel=16,
        upsample_rates=[4, 2],
        upsample_kernel_sizes=[8, 4],
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
    ),
    "stylegan2": lambda: stylegan.stylegan2_generator(w_dim=16, channels=(16, 16, 8)),
    "unet": lambda: unet.unet(size=16, widths=(4, 8, 16)),
}
# What the delegate still cannot run after phaseconv, by family (named in the README):
LEFT_OUTSIDE = {
    "mimi codes": {  # the codebook lookups, on int64 codes (XNNPACK runs float and quantized tensors)
        "aten::embedding.out",
        "aten::slice_copy.Tensor_out",
        "aten::squeeze_copy.dims_out",
        "aten::permute_copy.out",
        "aten::view_copy.out",
    },
}


# With -m slow (15-40 s each here): Mimi's codes variant (its quantizer's codebooks; the latents variant runs
# by default), DAC and StyleGAN2 (their rules run by default on EnCodec, Mimi and the MI-GAN-like generator).
SLOW_FAMILIES = {"mimi codes", "dac", "stylegan2"}


@pytest.mark.parametrize(
    "family", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FAMILIES else f for f in FAMILIES]
)
def test_family_lowers_rewritten_and_matches_the_model_as_built(family):
    model, inputs = FAMILIES[family]()
    with torch.no_grad():
        expected = model(*inputs)
    expected = getattr(expected, "audio_values", expected)
    ep = torch.export.export(phaseconv.prepare(model), inputs)
    rewritten = phaseconv.rewrite(ep)
    assert transposed_convs(ep), "the family upsamples with transposed convolutions"
    assert transposed_convs(rewritten) == [], [d for d in phaseconv.explain(ep) if not d.applied]
    summary, (output,) = lower_and_run(rewritten, *inputs)
    assert summary.inside["XNNConvTranspose2d"] == 0
    allowed = LEFT_OUTSIDE.get(family, set())
    assert set(summary.outside) <= allowed, summary.outside
    if not allowed:
        assert summary.partitions == 1, summary
    assert output.shape == expected.shape
    assert_close(output, expected, scale=float(expected.abs().max()))
