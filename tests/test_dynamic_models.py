"""Real architectures exported with a dynamic number of frames: one program for every length."""

import pytest
import torch
from torch.export import Dim

import phaseconv
from phaseconv.models import transformers_audio
from phaseconv.runtimes.executorch import LoadedProgram, to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, transposed_convs

pytest.importorskip("transformers")


def small_hifigan():
    """HiFi-GAN V1's layer kinds (k = 2s, p = s/2 transposed convolutions), small."""
    return transformers_audio.hifigan(
        6,
        model_in_dim=8,
        upsample_initial_channel=16,
        upsample_rates=[8, 2],
        upsample_kernel_sizes=[16, 4],
        resblock_kernel_sizes=[3],
        resblock_dilation_sizes=[[1, 3]],
    )


def test_hifigan_with_dynamic_frames_is_one_partition_and_exact_over_its_range():
    module, (mel,) = small_hifigan()
    module = phaseconv.prepare(module)
    ep = torch.export.export(module, (mel,), dynamic_shapes=({1: Dim("frames", min=2, max=40)},))
    rewritten = phaseconv.rewrite(ep)
    assert not transposed_convs(rewritten)
    buffer = to_xnnpack(rewritten).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    program = LoadedProgram(buffer)
    for frames in (2, 13, 40):
        x = torch.randn(1, frames, mel.shape[-1])
        with torch.no_grad():
            expected = module(x)
        (out,) = program.run((x,))
        assert out.shape == expected.shape
        assert_close(out, expected, scale=float(expected.abs().max()))
