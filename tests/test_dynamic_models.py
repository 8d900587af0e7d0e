"""Real architectures exported with a dynamic number of frames: one program for every length."""

import pytest
import torch
from torch.export import Dim

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.models import transformers_audio, unet
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import TINY_DAC, TINY_MIMI, assert_close, transposed_convs

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


def lowered_over_range(module, example, axis: int, shortest: int, longest: int):
    """phaseconv.prepare(module) exported with a Dim on `axis`, rewritten, lowered: (module, program
    after the rewrite, delegation summary, loaded program)."""
    module = phaseconv.prepare(module)
    ep = torch.export.export(module, (example,), dynamic_shapes=({axis: Dim("t", min=shortest, max=longest)},))
    rewritten = phaseconv.rewrite(ep)
    buffer = to_xnnpack(rewritten).buffer
    return module, rewritten, summarize_pte(buffer), LoadedProgram(buffer)


def assert_exact_at(module, program, example, axis: int, lengths) -> None:
    for length in lengths:
        shape = list(example.shape)
        shape[axis] = length
        x = torch.randn(shape)
        with torch.no_grad():
            expected = module(x)
        (out,) = program.run((x,))
        assert out.shape == expected.shape
        assert_close(out, expected, scale=float(expected.abs().max()))


def test_hifigan_with_dynamic_frames_is_one_partition_and_exact_over_its_range():
    module, (mel,) = small_hifigan()
    module, rewritten, summary, program = lowered_over_range(module, mel, 1, 2, 40)
    assert not transposed_convs(rewritten)
    assert summary.partitions == 1 and not summary.outside, summary
    assert_exact_at(module, program, mel, 1, (2, 13, 40))


@pytest.mark.slow  # 20 s: kept out of the default run's 15 minutes, run in CI
def test_mimi_with_dynamic_frames_is_one_partition_and_exact_over_its_range():
    """prepare's padding stays symbolic, the causal crops fold, the sliding-window mask and rotary
    tables are folded at the longest length and sliced, rotate_half is a matmul: one partition,
    with only the slices of those constants (and the size they read) outside."""
    module, (latents,) = transformers_audio.mimi_latents_decoder(3, **TINY_MIMI)
    module, rewritten, summary, program = lowered_over_range(module, latents, 2, 2, 24)
    assert not transposed_convs(rewritten)
    assert summary.partitions == 1, summary
    assert set(summary.outside) <= {"aten::slice_copy.Tensor_out", "aten::sym_size.int", "executorch_prim::mul.Scalar"}
    assert_exact_at(module, program, latents, 2, (2, 7, 24))


@pytest.mark.slow
def test_dac_with_dynamic_frames_is_one_partition_and_exact_over_its_range():
    """Snake's reshapes to sizes read from the input become static views with -1 (views rule)."""
    module, (latents,) = transformers_audio.dac_decoder(0.004, **TINY_DAC)
    module, rewritten, summary, program = lowered_over_range(module, latents, 2, 2, 30)
    assert not transposed_convs(rewritten)
    assert summary.partitions == 1 and not summary.outside, summary
    assert_exact_at(module, program, latents, 2, (2, 11, 30))


def test_unet_with_a_dynamic_height_is_one_partition_and_exact_and_declines_two_dynamic_sizes():
    """One dynamic image size: the 2-D interleave infers it. Both: XNNPACK's reshape infers only one
    size, so the layer is left with that reason."""
    module, (image,) = unet.unet(size=16, widths=(4, 8, 16))
    height, width = Dim("h", min=1, max=4), Dim("w", min=1, max=4)
    both = torch.export.export(module, (image,), dynamic_shapes=({2: 8 * height, 3: 8 * width},))
    reasons = {d.reason for d in phaseconv.explain(both) if d.rule == "conv_transpose"}
    assert all("XNNPACK's reshape (the interleave) infers only one" in reason for reason in reasons), reasons
    ep = torch.export.export(module, (image,), dynamic_shapes=({2: 8 * height},))
    rewritten = phaseconv.rewrite(ep)
    assert not transposed_convs(rewritten)
    buffer = to_xnnpack(rewritten).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    program = LoadedProgram(buffer)
    for rows in (8, 24, 32):
        x = torch.randn(1, 3, rows, 16)
        with torch.no_grad():
            expected = module(x)
        (out,) = program.run((x,))
        assert_close(out, expected, scale=float(expected.abs().max()))
