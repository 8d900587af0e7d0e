"""pocket-tts's whole text-to-speech model as one ExecuTorch program of several methods, the
contract's (contract.py): the text and voice conditioning, the flow language model over a KV cache,
the Mimi decoder, the config's tokenizer and settings, and the built-in voices' states.

The encoder's and decoder's states and the language model's KV cache are buffers the methods share
(ExecuTorch's `share_mutable_buffers`). A shared buffer's initial value is in the file once, with
the first method that has it, and is loaded with that method; a runner that loads only some methods
calls the reset methods before it uses their state (the runner calls them before every utterance).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim, ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts.decoder import EncoderStep, MimiStep, StreamingStep
from phaseconv.models.pocket_tts.language_model import (
    CACHE_BLOCK,
    PAD,
    ClearCache,
    FirstFrame,
    Generate,
    LoadVoice,
    Prompt,
    ReadVoice,
    cache_blocks,
    capacity_of,
    draw_noise,
    quantize_linears,
    with_cache,
)
from phaseconv.tts import voices as voice_states
from phaseconv.tts.contract import (
    PROMPT_TOKENS,
    VOICE_POSITIONS,
    Settings,
    decode_method,
    first_frame_method,
    generate_method,
    prompt_method,
    voice_method,
)
from phaseconv.tts.source import Model, tokenizer_kind

# A chunk's tokens at most: pocket-tts's MAX_TOKEN_PER_CHUNK (50) is where it splits; a sentence with
# no punctuation to split at can run longer.
MAX_TEXT_TOKENS = 128
# Frames of an audio voice per call of encode_voice: the encoder's activations are those of one frame.
VOICE_FRAMES_PER_CALL = 1
# The first prompt method reads this share of the cache's blocks, the other all of them: each is a
# whole language model to lower, and a chunk of text is prompted once while a frame method runs every
# frame (one per block: a frame reads the blocks that hold the utterance so far).
PROMPT_SHARE = 4
# Frames a decode method takes per call: a runner decodes several at once when its audio runs ahead
# (phaseconv.tts.decoding), so a call reads the weights once for them.
DECODE_FRAMES = (1, 2, 4)


def decode_frames(quantize_decoder: str | None) -> tuple[int, ...]:
    """The decode methods' frames a call: an int8 decoder has one frame a call only, since each
    decode_N would calibrate activation scales of its own and the audio would then depend on how far
    it ran ahead."""
    return DECODE_FRAMES if quantize_decoder is None else (1,)


# The int8 decoder's calibration: frames the language model generates in a row after this many random
# text tokens (the scales of a streaming step depend on its state: the frames are fed in order).
CALIBRATION_FRAMES, CALIBRATION_TOKENS = 40, 20
DECODER_QUANTIZATION = ("int8",)
# Where pocket-tts's TTSModel keeps these (class attributes), read once here for the settings.
_TTS_CONSTANTS = ("_MIN_FRAMES_BEFORE_EOS", "_TOKENS_PER_SECOND_ESTIMATE", "_GEN_SECONDS_PADDING")


class EmbedText(nn.Module):
    def __init__(self, tts: nn.Module):
        super().__init__()
        self.conditioner = tts.flow_lm.conditioner

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.conditioner(tokens)


class EncodeVoice(nn.Module):
    """`TTSModel._encode_audio`, streamed: audio [1, 1, frames * frame_size] (read, resampled, ended on a
    pause and padded as pocket-tts does) -> conditioning [1, frames, D], the encoder's state kept from
    call to call (EncoderStep), so a voice of any length takes memory for `frames` frames only."""

    def __init__(self, tts: nn.Module, frames: int = VOICE_FRAMES_PER_CALL):
        super().__init__()
        self.encoder = EncoderStep(tts.mimi, frames)
        self.speaker_proj_weight = tts.flow_lm.speaker_proj_weight

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return F.linear(self.encoder(audio), self.speaker_proj_weight)


class VoiceStart(nn.Module):
    """The learned conditioning before a voice prompt (`bos_before_voice`; zeros, unused, when the config
    inserts none)."""

    def __init__(self, tts: nn.Module):
        super().__init__()
        flow_lm = tts.flow_lm
        start = flow_lm.bos_before_voice if flow_lm.insert_bos_before_voice else torch.zeros(1, 1, flow_lm.dim)
        self.register_buffer("start", start.detach().clone())

    def forward(self) -> torch.Tensor:
        return self.start * 1  # a computed output: ExecuTorch returns no bare constant


class Decode(nn.Module):
    """The decoder step on the LM's latents, de-normalized as pocket-tts's decoder worker does."""

    def __init__(self, tts: nn.Module, decoder: MimiStep):
        super().__init__()
        self.decoder = decoder
        self.register_buffer("emb_std", tts.flow_lm.emb_std.detach().clone())
        self.register_buffer("emb_mean", tts.flow_lm.emb_mean.detach().clone())

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.decoder(latent * self.emb_std + self.emb_mean)


class ResetState(nn.Module):
    """Every state buffer of a streaming step back to its value before the first call. The step sits
    under the attribute name it has in the method that runs it (`under`), so that the buffers have
    the same names in both methods and the program shares them."""

    def __init__(self, step: StreamingStep, under: str):
        super().__init__()
        self.under = under
        self.add_module(under, step)
        self.names = step.state_names()
        # Plain tensors, which export lifts as constants: ExecuTorch takes a buffer written with another
        # buffer's value for an in-place write (insert_write_back_for_buffers_pass) and drops the copy.
        self.initial = [step.get_buffer(name).detach().clone() for name in self.names]

    def forward(self) -> torch.Tensor:
        step = self.get_submodule(self.under)
        for name, value in zip(self.names, self.initial):
            step.get_buffer(name).copy_(value)
        return torch.zeros(1)


def _max_tokens_per_chunk() -> int:
    from pocket_tts.default_parameters import MAX_TOKEN_PER_CHUNK

    return MAX_TOKEN_PER_CHUNK


def capacity_for(model: Model) -> int:
    """Cache positions for the longest voice (a built-in one, or 30 s of audio where the weights clone)
    and a chunk of pocket-tts's most tokens with all the frames it allows, in whole blocks."""
    tts = model.tts
    longest = max([state.shape[2] for state in model.voices.values()], default=0)
    if model.voice_cloning:
        longest = max(
            longest, voice_states.longest_audio_voice(tts.sample_rate, tts.mimi.frame_size, _voice_start(tts))
        )
    tokens = _max_tokens_per_chunk()
    seconds = tokens / tts._TOKENS_PER_SECOND_ESTIMATE + tts._GEN_SECONDS_PADDING
    needed = longest + tokens + math.ceil(seconds * tts.config.mimi.frame_rate)
    return -(-needed // CACHE_BLOCK) * CACHE_BLOCK


def generate_blocks(blocks: int) -> list[int]:
    """The last block each frame method reads: one method per block."""
    return list(range(blocks))


def prompt_blocks(blocks: int, share: int = PROMPT_SHARE) -> list[int]:
    """The last block each prompt method reads, of the cache's `blocks`: the last of the first 1/`share`
    of them (a voice of a few seconds and the first chunk of text after it lie there: the prompt time
    to first audio waits for), and the last block."""
    return sorted({math.ceil(blocks / share) - 1, blocks - 1})


def _voice_start(tts: nn.Module) -> bool:
    return bool(tts.flow_lm.insert_bos_before_voice)


def settings_of(model: Model, flow_lm: nn.Module, quantize, quantize_decoder) -> Settings:
    """The settings the runner reads from the program: shapes (the cache's, of `flow_lm`: with_cache's),
    and the config's generation and text settings."""
    tts, config = model.tts, model.tts.config
    attention = tts.flow_lm.transformer.layers[0].self_attn
    blocks = len(cache_blocks(flow_lm))
    return Settings(
        config=model.config,
        weights=model.weights,
        voice_cloning=model.voice_cloning,
        capacity=capacity_of(flow_lm),
        cache_block=CACHE_BLOCK,
        generate_blocks=generate_blocks(blocks),
        prompt_blocks=prompt_blocks(blocks),
        layers=len(tts.flow_lm.transformer.layers),
        kv_heads=attention.num_kv_heads,
        head_dim=attention.dim_per_head,
        dim=tts.flow_lm.dim,
        latent_dim=tts.flow_lm.ldim,
        n_bins=config.flow_lm.lookup_table.n_bins,
        voice_start=_voice_start(tts),
        sample_rate=tts.sample_rate,
        frame_rate=config.mimi.frame_rate,
        frame_size=tts.mimi.frame_size,
        temperature=config.default_temperature,
        eos_threshold=config.default_eos_threshold,
        noise_clamp=tts.noise_clamp,
        frames_after_eos=config.model_recommended_frames_after_eos,
        min_frames_before_eos=tts._MIN_FRAMES_BEFORE_EOS,
        max_tokens_per_chunk=_max_tokens_per_chunk(),
        tokens_per_second=tts._TOKENS_PER_SECOND_ESTIMATE,
        gen_seconds_padding=tts._GEN_SECONDS_PADDING,
        max_voice_seconds=voice_states.MAX_VOICE_SECONDS,
        pad_with_spaces_for_short_inputs=config.pad_with_spaces_for_short_inputs,
        remove_semicolons=config.remove_semicolons,
        append_terminal_punctuation=config.append_terminal_punctuation,
        capitalize_first_letter=config.capitalize_first_letter,
        replace_characters=dict(config.replace_characters),
        tokenizer=tokenizer_kind(model.tokenizer) if model.tokenizer is not None else None,
        voices={name: state.shape[2] for name, state in model.voices.items()},
        default_voice=model.default_voice,
        quantize=quantize,
        quantize_decoder=quantize_decoder,
        max_text_tokens=MAX_TEXT_TOKENS,
        decode_frames=list(decode_frames(quantize_decoder)),
    )


@contextlib.contextmanager
def _fresh_mask_cache():
    """pocket-tts caches its causal masks in a module global; an export fills it with traced tensors."""
    from pocket_tts.modules import attention

    attention._CAUSAL_MASK_CACHE.clear()
    try:
        yield
    finally:
        attention._CAUSAL_MASK_CACHE.clear()


# Each method that puts state back to its start, and the methods whose state that is: the methods
# share a buffer when they name it alike, so a reset must write every buffer the others write.
RESETS = {
    "reset_encoder": ["encode_voice"],
    "reset_decoder": ["decode"],  # and decode_2, ...
    "clear_cache": ["prompt", "first_frame", "generate", "load_voice"],  # prompt_B, ...: one per ladder step
}


def written_buffers(programs: dict[str, ExportedProgram], names: list[str]) -> set[str]:
    """The buffers the named methods (`name` or `name_...`) write in place (exported before
    decomposition, a write is an in-place operator on the buffer's placeholder)."""
    written = set()
    for name in [method for method in programs if any(method == n or method.startswith(f"{n}_") for n in names)]:
        buffers = programs[name].graph_signature.inputs_to_buffers
        for node in programs[name].graph.nodes:
            schema = getattr(node.target, "_schema", None)
            if schema is not None and schema.is_mutable and node.args and str(node.args[0]) in buffers:
                written.add(buffers[str(node.args[0])])
    return written


@torch.no_grad()
def lm_latents(tts: nn.Module, frames: int = CALIBRATION_FRAMES, seed: int = 0) -> list[torch.Tensor]:
    """`frames` latents [1, 1, ldim] the language model generates in a row, as the decoder gets them:
    after its start without a voice and CALIBRATION_TOKENS random tokens, at the config's temperature
    (noise from a generator seeded with `seed`), in eager PyTorch on a copy of the model."""
    generator = torch.Generator().manual_seed(seed)
    first = 1 + CALIBRATION_TOKENS
    flow_lm = with_cache(tts.flow_lm, capacity=first + frames, block=first + frames)
    prompt, generate = Prompt(flow_lm), Generate(flow_lm, block=0)
    tokens = torch.randint(0, tts.config.flow_lm.lookup_table.n_bins, (1, CALIBRATION_TOKENS), generator=generator)
    prompt(VoiceStart(tts)(), torch.arange(1))
    prompt(EmbedText(tts)(tokens), torch.arange(1, first))
    latent, start, latents = torch.zeros(1, 1, flow_lm.ldim), torch.ones(1), []
    for position in range(first, first + frames):
        noise = draw_noise(generator, flow_lm.ldim, tts.temp, tts.noise_clamp)
        latent, _ = generate(latent, start, noise, torch.tensor([position]))
        start = torch.zeros(1)
        latents.append(latent)
    return latents


def quantized_decode(program: ExportedProgram, tts: nn.Module, decode: Decode) -> ExportedProgram:
    """A decode method in static int8 (phaseconv.quantize), calibrated on the language model's own
    latents in order, as many a call as it takes; the decoder's last residual block stays fp32
    (MimiStep.output_block)."""
    from phaseconv.quantize import quantize

    latents, frames = torch.cat(lm_latents(tts), dim=1), decode.decoder.frames
    calibration = [(latents[:, i : i + frames],) for i in range(0, latents.shape[1] - frames + 1, frames)]
    return quantize(program, calibration, keep_float=[f"decoder.{decode.decoder.output_block()}"])


def tts_programs(
    model: Model,
    capacity: int | None = None,
    quantize: str | None = None,
    quantize_decoder: str | None = None,
) -> tuple[dict[str, ExportedProgram], dict, Settings]:
    """The exported methods of the text-to-speech program, its constant methods and its settings;
    `capacity` (default: capacity_for) sizes the cache, `quantize` (8da4w or 8da8w) quantizes the
    language model's linear layers, `quantize_decoder` (int8) the decode method."""
    if quantize_decoder not in (None, *DECODER_QUANTIZATION):
        known = ", ".join(DECODER_QUANTIZATION)
        raise PhaseconvError(f"the decoder's quantization is one of {known}, got {quantize_decoder!r}")
    tts = model.tts
    capacity = capacity or capacity_for(model)
    flow_lm = with_cache(tts.flow_lm, capacity)
    if quantize is not None:
        quantize_linears(flow_lm, quantize)
    # the program's methods are the ones its settings name
    settings = settings_of(model, flow_lm, quantize, quantize_decoder)
    blocks, prompts = settings.generate_blocks, settings.prompt_blocks
    decoders = {frames: Decode(tts, MimiStep(tts.mimi, frames=frames)) for frames in decode_frames(quantize_decoder)}
    voice = EncodeVoice(tts)
    dim, ldim, frame = flow_lm.dim, flow_lm.ldim, tts.mimi.frame_size
    attention = flow_lm.transformer.layers[0].self_attn.attention
    state = torch.zeros(
        len(flow_lm.transformer.layers), 2, VOICE_POSITIONS, attention.num_kv_heads, attention.dim_per_head
    )
    tokens = Dim("tokens", min=1, max=MAX_TEXT_TOKENS)
    prompt_tokens = Dim("prompt_tokens", min=1, max=PROMPT_TOKENS)
    one, latent, noise = torch.zeros(1), torch.zeros(1, 1, ldim), torch.zeros(1, ldim)
    positions = torch.full((VOICE_POSITIONS,), PAD)
    methods = {
        "embed_text": (EmbedText(tts), (torch.zeros(1, 5, dtype=torch.long),), ({1: tokens},)),
        "voice_start": (VoiceStart(tts), (), None),
        "encode_voice": (voice, (torch.zeros(1, 1, VOICE_FRAMES_PER_CALL * frame),), None),
        "reset_encoder": (ResetState(voice.encoder, "encoder"), (), None),
        **{
            prompt_method(block): (
                Prompt(flow_lm, block),
                (torch.zeros(1, PROMPT_TOKENS, dim), torch.arange(PROMPT_TOKENS)),
                ({1: prompt_tokens}, {0: prompt_tokens}),
            )
            for block in prompts
        },
        **{
            first_frame_method(block): (
                FirstFrame(flow_lm, block),
                (torch.zeros(1, PROMPT_TOKENS, dim), torch.arange(PROMPT_TOKENS + 1), noise),
                ({1: prompt_tokens}, {0: prompt_tokens + 1}, None),
            )
            for block in prompts
        },
        "load_voice": (LoadVoice(flow_lm), (state, positions), None),
        "read_voice": (ReadVoice(flow_lm), (torch.arange(VOICE_POSITIONS),), None),
        **{
            generate_method(block): (
                Generate(flow_lm, block, first_block=first),
                (latent, one, noise, torch.tensor([0])),
                None,
            )
            for first, block in zip([0, *(b + 1 for b in blocks)], blocks)
        },
        "clear_cache": (ClearCache(flow_lm), (), None),
        **{
            decode_method(frames): (decode, (torch.zeros(1, frames, ldim),), None)
            for frames, decode in decoders.items()
        },
        "reset_decoder": (ResetState(decoders[1].decoder, "decoder"), (), None),
    }
    programs = {}
    with torch.no_grad(), _fresh_mask_cache():
        for name, (module, inputs, dynamic_shapes) in methods.items():
            programs[name] = torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes)
        if quantize_decoder is not None:
            for frames, decode in decoders.items():
                programs[decode_method(frames)] = quantized_decode(programs[decode_method(frames)], tts, decode)
    assert capacity_of(flow_lm) == capacity
    for resetting, running in RESETS.items():
        missing = written_buffers(programs, running) - written_buffers(programs, [resetting])
        assert not missing, f"{resetting} leaves {sorted(missing)} of {running} as they were"
    constants = {"settings": settings.to_json()}
    if model.tokenizer is not None:
        constants["tokenizer"] = torch.frombuffer(bytearray(model.tokenizer.read_bytes()), dtype=torch.uint8)
    constants |= {voice_method(name): state.contiguous() for name, state in model.voices.items()}
    return programs, constants, settings


def lower_tts(
    model: Model,
    capacity: int | None = None,
    quantize: str | None = None,
    quantize_decoder: str | None = None,
    rewrite: bool = True,
    external_constants: bool = False,
    target: str = "any",
    progress=None,
    workers: int | None = None,
    scratch=None,
    stages=None,
):
    """The text-to-speech program of a pocket-tts model, lowered: a LoweredProgram of its methods,
    and its settings. Its methods are lowered in `workers` processes (default: one per core), their
    weights waiting under `scratch` (phaseconv.lower); `stages` records where time and memory went."""
    from phaseconv.lowering import lower
    from phaseconv.lowering.methods import default_workers
    from phaseconv.lowering.profile import StageLog

    if capacity is not None and capacity < 2 * PROMPT_TOKENS:
        raise PhaseconvError(f"--capacity {capacity}: the language model needs room for a prompt and frames")
    stages = stages if stages is not None else StageLog()
    stages.start("export")
    programs, constants, settings = tts_programs(model, capacity, quantize, quantize_decoder)
    stages.stop()
    exported = stages.stages[-1].seconds
    lowered = lower(
        programs,
        rewrite=rewrite,
        external_constants=external_constants,
        target=target,
        constant_methods=constants,
        progress=progress,
        workers=workers or default_workers(),
        scratch=scratch,
        stages=stages,
    )
    lowered.seconds["export"] = exported
    return lowered, settings
