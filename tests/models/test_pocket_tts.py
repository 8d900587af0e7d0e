"""pocket-tts's Mimi decoder as a streaming step: through the runtime, frame by frame, against
pocket-tts's own streaming decode of the same latents."""

import copy

import pytest
import torch

import phaseconv
from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts import MimiStep, build_mimi, peak_scaled_pcm_error, stream_eager
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import STATE_WRITES, transposed_convs

pytest.importorskip("pocket_tts")

SMALL, DEFAULT = "english_2m_2026-10", "english_2026-09"
FRAMES = 60  # past the decoder transformer's context window (250 steps = 16 frames; small: 50 steps)


def lowered_step(mimi):
    step = MimiStep(mimi)
    latent = torch.zeros(1, 1, step.latent_dim)
    with torch.no_grad():
        ep = torch.export.export(step, (latent,))
    return phaseconv.rewrite(ep), phaseconv.lower(ep)


def stream_runtime(buffer: bytes, latents: torch.Tensor) -> torch.Tensor:
    program = LoadedProgram(buffer)
    return torch.cat([program.run((latents[:, i : i + 1],))[0] for i in range(latents.shape[1])], dim=-1)


# 22 s each: kept out of the default run's 15 minutes, run in CI (`-m slow`)
@pytest.mark.parametrize(
    "config", [pytest.param(SMALL, marks=pytest.mark.slow), pytest.param(DEFAULT, marks=pytest.mark.slow)]
)
def test_streamed_step_equals_pocket_tts_streaming_decode(config):
    mimi = build_mimi(config)
    rewritten, lowered = lowered_step(mimi)
    assert transposed_convs(rewritten) == []
    assert lowered.summary.partitions == 1 and set(lowered.summary.outside) <= STATE_WRITES, lowered.summary
    latents = torch.randn(1, FRAMES, mimi.quantizer.dimension, generator=torch.Generator().manual_seed(3))
    expected = torch.cat(list(stream_eager(copy.deepcopy(mimi), latents)), dim=-1)
    audio = stream_runtime(lowered.buffer, latents)
    assert audio.shape == (1, 1, FRAMES * 1920)
    assert peak_scaled_pcm_error(audio, expected) < 1.0
    # A fresh load is a new utterance: the same audio again.
    assert torch.equal(stream_runtime(lowered.buffer, latents), audio)


def onnx_step(ep):
    pytest.importorskip("onnxruntime")
    from phaseconv.runtimes.onnxruntime import OrtSession

    return OrtSession(phaseconv.export_onnx(ep)[0])


def litert_step(ep):
    pytest.importorskip("litert_torch")
    from phaseconv.runtimes.litert import LiteRTSession

    return LiteRTSession(phaseconv.export_litert(ep)[0])


# 25 s (ONNX) and 70 s (LiteRT's conversion) on top of the stateful exports' own tests: run in CI (`-m slow`)
@pytest.mark.slow
@pytest.mark.parametrize("peer", [pytest.param(onnx_step, id="onnx"), pytest.param(litert_step, id="litert")])
def test_a_peer_runtime_step_streams_like_pocket_tts(peer):
    """ONNX Runtime's and LiteRT's step keep its state as inputs and outputs: each call fed what the
    one before returned, past the transformer's context window, the audio is pocket-tts's own."""
    mimi = build_mimi(SMALL)
    step = MimiStep(mimi)
    with torch.no_grad():
        ep = torch.export.export(step, (torch.zeros(1, 1, step.latent_dim),))
    session = peer(ep)
    assert session.state_names  # its caches, as inputs and outputs
    latents = torch.randn(1, FRAMES, step.latent_dim, generator=torch.Generator().manual_seed(3))
    frames, state = [], ()
    for i in range(FRAMES):
        frame, *state = session.run((latents[:, i : i + 1],), tuple(state))
        frames.append(frame)
    expected = torch.cat(list(stream_eager(copy.deepcopy(mimi), latents)), dim=-1)
    assert peak_scaled_pcm_error(torch.cat(frames, dim=-1), expected) < 1.0


# 40 s: run in CI (`-m slow`)
@pytest.mark.slow
def test_int8_step_with_its_output_block_kept_float():
    """The step quantized with keep_float=[output_block()]: that block's convolutions keep fp32 weights,
    the program is still one partition, and the runtime follows the quantized program frame by frame."""
    from phaseconv.graph.keep_float import from_modules
    from phaseconv.graph.quantized import QUANTIZE
    from phaseconv.quantize import quantize, snr_db

    step = MimiStep(build_mimi(SMALL))
    latents = torch.randn(1, 20, step.latent_dim, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ep = torch.export.export(step, (latents[:, :1],))
    block = step.output_block()
    assert block == "mimi.decoder.model.9"  # the last of three SEANet residual blocks
    quantized = quantize(ep, [(latents[:, i : i + 1],) for i in range(8)], keep_float=[block])
    convs = [n for n in quantized.graph.nodes if n.target == torch.ops.aten.conv2d.default]
    kept = [n for n in convs if from_modules(n, [block])]
    assert kept and all(n.args[1].op == "placeholder" for n in kept)  # an fp32 weight, not a dequantize
    assert all(n.args[1].op == "call_function" for n in convs if n not in kept)
    lowered = phaseconv.lower(quantized)
    assert lowered.summary.partitions == 1 and set(lowered.summary.outside) <= STATE_WRITES, lowered.summary
    module = copy.deepcopy(quantized.module())
    with torch.no_grad():
        expected = torch.cat([module(latents[:, i : i + 1]) for i in range(20)], dim=-1)
    output_step = [n for n in quantized.graph.nodes if n.target == QUANTIZE][-1].args[1]
    # With ELU one operator (XNNPACK's int8 ELU) the runtime lands up to 4 output steps from the
    # quantized program, 43.7 dB against it; with ELU decomposed, 1.2 steps and 43.5 dB. Not a drift:
    # the same 3-4 steps on every frame.
    out = stream_runtime(lowered.buffer, latents)
    torch.testing.assert_close(out, expected, rtol=0, atol=4.5 * output_step)  # 4 steps, float rounding
    assert snr_db(expected, out) > 40


def test_step_module_equals_pocket_tts_in_eager_for_every_frame():
    mimi = build_mimi(SMALL)
    step = MimiStep(mimi)
    latents = torch.randn(1, 8, step.latent_dim)
    with torch.no_grad():
        frames = [step(latents[:, i : i + 1]) for i in range(8)]
    for frame, expected in zip(frames, stream_eager(copy.deepcopy(mimi), latents)):
        torch.testing.assert_close(frame, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("frames", [2, 4])
def test_a_step_of_several_frames_equals_as_many_steps_of_one_and_keeps_their_state(frames):
    """pocket-tts's decoder thread decodes the latents queued at once: the step over `frames` frames
    gives the audio of one frame at a time, and leaves the same state (its buffers, named alike, are
    those of the one-frame step)."""
    mimi = build_mimi(SMALL)
    one, several = MimiStep(mimi), MimiStep(mimi, frames=frames)
    latents = torch.randn(1, 3 * frames, one.latent_dim)
    with torch.no_grad():
        expected = torch.cat([one(latents[:, i : i + 1]) for i in range(latents.shape[1])], dim=-1)
        heard = torch.cat([several(latents[:, i : i + frames]) for i in range(0, latents.shape[1], frames)], dim=-1)
    torch.testing.assert_close(heard, expected, rtol=1e-5, atol=1e-6)
    assert one.state_names() == several.state_names()
    for name in one.state_names():
        torch.testing.assert_close(several.get_buffer(name), one.get_buffer(name), rtol=1e-5, atol=1e-5)


def test_weights_from_a_safetensors_file(tmp_path):
    from safetensors.torch import save_file

    source = build_mimi(SMALL, seed=7)
    path = tmp_path / "mimi.safetensors"
    save_file({f"mimi.{k}": v.contiguous() for k, v in source.state_dict().items()}, path)
    loaded = build_mimi(SMALL, weights=path)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in source.state_dict().items())
    with pytest.raises(PhaseconvError, match="do not fit pocket-tts config english_2026-09"):
        build_mimi(DEFAULT, weights=path)


def test_unknown_config_names_the_shipped_ones():
    with pytest.raises(PhaseconvError, match="unknown pocket-tts config 'nope'.*english_2026-09"):
        build_mimi("nope")
