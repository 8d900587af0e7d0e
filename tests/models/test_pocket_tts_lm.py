"""pocket-tts's flow language model as prompt and generate steps over a fixed KV cache: the same
latents and EOS logits as pocket-tts's own streaming generation, in eager PyTorch."""

import pytest
import torch

from phaseconv.models.pocket_tts.language_model import (
    MASKED,
    PAD,
    SPILL,
    FirstFrame,
    Generate,
    LoadVoice,
    Prompt,
    ReadVoice,
    attention_masks,
    block_sizes,
    quantize_linears,
    with_cache,
)
from phaseconv.tts.build import (
    RESETS,
    EmbedText,
    EncodeVoice,
    generate_blocks,
    prompt_blocks,
    tts_programs,
    written_buffers,
)
from phaseconv.tts.source import build_tts, random_model

pytest.importorskip("pocket_tts")

FRAMES = 12
# one config per flow head: pointwise (with grouped-query attention), drifting, lsd
CONFIGS = ["english_2m_2026-10", "english_18m_2026-10", "english_2026-09"]


def pocket_tts_frames(tts, conditioning, tokens, frames):
    """pocket-tts's calls: the voice prompt, the text prompt, then one frame per call (temperature 0)."""
    from pocket_tts.modules.stateful_module import increment_steps, init_states

    flow_lm = tts.flow_lm
    state = init_states(flow_lm, batch_size=1, sequence_length=conditioning.shape[1])
    tts._run_flow_lm_and_increment_step(model_state=state, audio_conditioning=conditioning)
    tts._expand_kv_cache(state, conditioning.shape[1] + tokens.shape[1] + frames)
    tts._run_flow_lm_and_increment_step(model_state=state, text_tokens=tokens)
    sequence, results = torch.full((1, 1, flow_lm.ldim), float("nan")), []
    for _ in range(frames):
        empty_text, empty_audio = torch.zeros((1, 0), dtype=torch.long), torch.empty((1, 0, flow_lm.dim))
        sequence, eos = tts._run_flow_lm(
            model_state=state,
            text_tokens=empty_text,
            backbone_input_latents=sequence,
            audio_conditioning=empty_audio,
        )
        increment_steps(flow_lm, state, increment=1)
        results.append((sequence, eos))
    return results


@pytest.mark.parametrize("first_frame", [False, True], ids=["text-then-frames", "first-frame-with-the-text"])
@pytest.mark.parametrize("config", CONFIGS)
@torch.no_grad()
def test_steps_give_pocket_tts_latents(config, first_frame):
    """Prompt, then Generate per frame; or FirstFrame (the text and the first frame in one call), then
    Generate from the second frame on."""
    tts = build_tts(config)
    tts.temp = 0.0
    audio = torch.randn(1, 1, 3 * 1920, generator=torch.Generator().manual_seed(0)) * 0.1
    conditioning = torch.cat([tts.flow_lm.bos_before_voice, tts._encode_audio(audio)], dim=1)
    tokens = torch.randint(0, 4000, (1, 9), generator=torch.Generator().manual_seed(1))
    expected = pocket_tts_frames(tts, conditioning, tokens, FRAMES)

    # blocks of 8 positions (the last one of 4): the prompts span several, the frames cross into new ones
    flow_lm = with_cache(tts.flow_lm, capacity=36, block=8)
    prompt, generate = Prompt(flow_lm), [Generate(flow_lm, block) for block in range(5)]
    voice, text = conditioning.shape[1], tokens.shape[1]
    prompt(conditioning[:, :3], torch.arange(3))  # the voice in two calls, as the runner splits a long one
    prompt(conditioning[:, 3:], torch.arange(3, voice))
    latent, start, noise = torch.zeros(1, 1, flow_lm.ldim), torch.ones(1), torch.zeros(1, flow_lm.ldim)
    if first_frame:
        frame = FirstFrame(flow_lm, block=4)(EmbedText(tts)(tokens), torch.arange(voice, voice + text + 1), noise)
    else:
        prompt(EmbedText(tts)(tokens), torch.arange(voice, voice + text))
    for step, (wanted, eos) in enumerate(expected):
        position = voice + text + step
        if first_frame and step == 0:
            latent, eos_logit = frame
        else:
            latent, eos_logit = generate[position // 8](latent, start, noise, torch.tensor([position]))
        start = torch.zeros(1)
        torch.testing.assert_close(latent, wanted, rtol=1e-4, atol=1e-5)
        assert bool(eos_logit > tts.eos_threshold) == bool(eos)


@torch.no_grad()
def test_voice_encoded_a_few_frames_at_a_time_is_pocket_tts_encoding():
    """The encoder is causal: 8 frames a call, the last call padded with zeros, give the same latents."""
    tts = build_tts("english_18m_2026-10")
    audio = torch.randn(1, 1, 19 * 1920, generator=torch.Generator().manual_seed(0)) * 0.1
    expected = tts._encode_audio(audio)
    encode = EncodeVoice(tts, frames=8)
    padded = torch.nn.functional.pad(audio, (0, 5 * 1920))
    streamed = torch.cat([encode(padded[..., i : i + 8 * 1920]) for i in range(0, 24 * 1920, 8 * 1920)], dim=1)
    torch.testing.assert_close(streamed[:, :19], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # 17 s: every method of the program lowered
def test_each_reset_writes_the_state_its_methods_write_under_the_same_names():
    """The methods share a buffer only when they name it alike: a reset of other names would leave the
    state of the last utterance in place (tts_programs also refuses to build such a program)."""
    programs, _, _ = tts_programs(random_model(CONFIGS[0]), capacity=64)
    for resetting, running in RESETS.items():
        state = written_buffers(programs, running)
        assert state and state <= written_buffers(programs, [resetting]), resetting


@torch.no_grad()
def test_padded_calls_later_frame_methods_and_voice_states_give_the_same_frames():
    """What the program's fixed-size calls rely on: a prompt padded with PAD positions, a frame method
    that reads more blocks than the frame needs, one that writes only the blocks its frames fall in,
    a prompt that reads only the blocks up to its last position, and a voice state loaded
    (LoadVoice) instead of prompted give the frames of the plain calls; ReadVoice reads back the
    state the prompt wrote."""
    tts = build_tts(CONFIGS[0])
    conditioning = torch.randn(1, 11, tts.flow_lm.dim, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 4000, (1, 5), generator=torch.Generator().manual_seed(1))

    def frames(voice, prompt_size, method_block, prompt_block=lambda last: None, capacity=36, first_block=lambda b: 0):
        flow_lm = with_cache(tts.flow_lm, capacity=capacity, block=8)

        def padded_prompt(embeddings, first):
            count = embeddings.shape[1]
            filler = torch.zeros(1, prompt_size - count, embeddings.shape[2])
            places = torch.cat([torch.arange(first, first + count), torch.full((prompt_size - count,), PAD)])
            Prompt(flow_lm, prompt_block(first + count - 1))(torch.cat([embeddings, filler], dim=1), places)

        if voice is None:
            padded_prompt(conditioning, 0)
        else:
            LoadVoice(flow_lm)(voice, torch.arange(voice.shape[2]))
        padded_prompt(EmbedText(tts)(tokens), 11)
        latent, start, out = torch.zeros(1, 1, flow_lm.ldim), torch.ones(1), []
        for position in range(16, 30):
            generate = Generate(flow_lm, method_block(position), first_block=first_block(method_block(position)))
            latent, eos = generate(latent, start, torch.zeros(1, flow_lm.ldim), torch.tensor([position]))
            start = torch.zeros(1)
            out.append(latent)
        state = ReadVoice(flow_lm)(torch.arange(11))
        return torch.cat(out, dim=1), state

    plain, state = frames(None, 16, lambda p: p // 8)
    torch.testing.assert_close(frames(None, 24, lambda p: p // 8)[0], plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(frames(None, 16, lambda p: 4)[0], plain, rtol=1e-5, atol=1e-6)
    # a ladder of frame methods [2, 4]: generate_4 writes blocks 3 .. 4 alone, where its frames fall
    ladder = frames(None, 16, lambda p: 2 if p < 24 else 4, first_block=lambda b: {2: 0, 4: 3}[b])
    torch.testing.assert_close(ladder[0], plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ladder[1], state, rtol=1e-5, atol=1e-6)
    # the voice's prompt reads blocks 0 .. 1 of 5, the text's block 1 alone holds its positions 11 .. 15
    fewer_blocks, fewer_state = frames(None, 16, lambda p: p // 8, prompt_block=lambda last: last // 8)
    torch.testing.assert_close(fewer_blocks, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fewer_state, state, rtol=1e-5, atol=1e-6)
    loaded, again = frames(state, 16, lambda p: p // 8)
    torch.testing.assert_close(loaded, plain, rtol=1e-5, atol=1e-6)
    assert torch.equal(again, state) and state.shape == (8, 2, 11, 1, 64)


def test_a_frame_method_per_block():
    assert generate_blocks(11) == list(range(11)) and generate_blocks(1) == [0]


def test_prompt_methods_are_the_first_of_four_steps_and_the_last_block():
    assert prompt_blocks(11) == [2, 10] and prompt_blocks(4) == [0, 3] and prompt_blocks(1) == [0]


def test_masks_follow_pocket_tts_rule():
    """A token at position p attends to the keys at positions <= p: cached slots before the call's first
    position, and its own and earlier keys of the call."""
    cached, own = attention_masks(torch.tensor([3.0]), steps=3, slots=torch.tensor([0.0, 1, 2, 3, 4, 5, SPILL]))
    masked = float(torch.tensor(MASKED))
    assert cached.tolist() == [[0, 0, 0, masked, masked, masked, masked]]
    assert own.tolist() == [[0, masked, masked], [0, 0, masked], [0, 0, 0]]


def test_cache_blocks_cover_the_capacity():
    assert block_sizes(384, 64) == [64] * 6 and block_sizes(36, 8) == [8, 8, 8, 8, 4] and block_sizes(16, 64) == [16]


@pytest.mark.parametrize("scheme", ["8da4w", "8da8w"])
def test_quantization_covers_the_transformer_and_the_flow_head(scheme):
    from torchao.utils import TorchAOBaseTensor

    flow_lm = with_cache(build_tts("english_2m_2026-10").flow_lm, capacity=16)
    quantize_linears(flow_lm, scheme)
    linears = {name: m for name, m in flow_lm.named_modules() if isinstance(m, torch.nn.Linear)}
    quantized = {name for name, m in linears.items() if isinstance(m.weight, TorchAOBaseTensor)}
    assert quantized == {name for name in linears if name.startswith(("transformer.", "flow_net."))}


def test_4bit_weights_are_grouped_by_the_first_group_size_that_divides_a_layers_inputs():
    module = torch.nn.Module()
    module.transformer = torch.nn.Sequential(*(torch.nn.Linear(inputs, 8) for inputs in (512, 192, 112)))
    quantize_linears(module, "8da4w")
    assert [layer.weight.block_size for layer in module.transformer] == [(1, 128), (1, 32), (1, 112)]


@pytest.mark.parametrize("scheme", ["8da4w", "8da8w"])
def test_quantized_linears_lower_to_xnnpack_quantized(scheme):
    """Each scheme's linear runs inside XNNPACK on quantized weights (8-bit weights grouped would not lower)."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import summarize_pte

    class Layer(torch.nn.Module):  # named as the language model's linears are
        def __init__(self):
            super().__init__()
            # 4-bit weights in groups of 128 and of 32
            self.transformer = torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.Linear(64, 48, bias=False))

        def forward(self, x):
            return self.transformer(x)

    module, x = Layer().eval(), torch.randn(2, 256)
    quantize_linears(module, scheme)
    buffer = to_xnnpack(torch.export.export(module, (x,))).buffer
    assert summarize_pte(buffer).inside["XNNConvert"] == 2  # activations quantized at run time, per layer
    got, expected = LoadedProgram(buffer).run((x,))[0], module(x)
    assert (got - expected).abs().max() < 0.01 * expected.abs().max()  # XNNPACK's integer kernels round as they do


def test_weights_that_do_not_fit_the_config_are_named(tmp_path):
    import safetensors.torch

    from phaseconv.errors import PhaseconvError

    state = build_tts("english_2m_2026-10").state_dict()
    state["flow_lm.bos_emb"] = torch.zeros(7)
    del state["mimi.decoder.model.0.conv.weight"]
    state["extra.weight"] = torch.zeros(1)
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "model.safetensors")
    with pytest.raises(PhaseconvError) as error:
        build_tts("english_2m_2026-10", weights=tmp_path / "model.safetensors")
    message = str(error.value)
    assert "1 missing (e.g. mimi.decoder.model.0.conv.weight)" in message
    assert "1 unexpected (e.g. extra.weight)" in message
    assert "flow_lm.bos_emb: [7] in the file, [32] in the config" in message
    with pytest.raises(PhaseconvError, match="no such weights file"):
        build_tts("english_2m_2026-10", weights=tmp_path / "none.safetensors")


def test_same_weights_file_loads_into_the_model(tmp_path):
    import safetensors.torch

    tts = build_tts("english_2m_2026-10", seed=3)
    state = {k: v.contiguous() for k, v in tts.state_dict().items()}
    safetensors.torch.save_file(state, tmp_path / "model.safetensors")
    loaded = build_tts("english_2m_2026-10", weights=tmp_path / "model.safetensors", seed=0)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())
