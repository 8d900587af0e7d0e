"""pocket-tts's whole text-to-speech model as one ExecuTorch program of several methods.

    embed_text(tokens [1, T]) -> embeddings [1, T, D]            the text conditioning
    voice_start() -> [1, 1, D]                                   the conditioning before a voice prompt
    encode_voice(audio [1, 1, 4 * frame]) -> [1, 4, D]           Mimi's encoder and the speaker
    reset_encoder() -> zero [1]                                    projection, 4 frames a call, streamed
    prompt(embeddings [1, T, D], positions [T]) -> hidden [1, D] conditioning into the LM's cache,
                                                                 T <= 128 a call
    generate_b(latent, start, noise, positions [1]) -> (latent, eos_logit)  one 80 ms frame, at a
                                                                 position in the cache's block b
    clear_cache() -> zero [1]                                    the LM's cache to zeros
    decode(latent [1, 1, ldim]) -> pcm [1, 1, frame]             the Mimi decoder step
    reset_decoder() -> zero [1]                                  the decoder's state to its start
    settings() -> JSON                                           what a runner needs (settings_of)

The encoder's and decoder's states and the language model's KV cache are buffers the methods share
(ExecuTorch's `share_mutable_buffers`), so a runner calls the methods in pocket-tts's order: the
voice prompt at positions 0 .. V - 1 once, then per chunk of text its tokens at V .. V + T - 1 and
one frame per position after them; the next chunk starts again at V (pocket-tts copies the voice's
state per chunk), with the decoder reset (pocket-tts starts a new decoder per chunk). A shared
buffer's initial value is in the file once, with the first method that has it, and is loaded with
that method; a runner that loads only some methods calls the reset methods before it uses their
state (the runner calls them before every utterance).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim, ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts.decoder import (
    EncoderStep,
    MimiStep,
    StreamingStep,
    _pocket_tts,
    check_state,
    config_names,
)
from phaseconv.models.pocket_tts.language_model import (
    CACHE_BLOCK,
    ClearCache,
    Generate,
    Prompt,
    block_starts,
    cache_blocks,
    capacity_of,
    draw_noise,
    quantize_linears,
    with_cache,
)

DEFAULT_TTS_CONFIG = "english_18m_2026-10"
# Positions of the language model's cache: a voice prompt (12.5 per second), a chunk's text tokens and
# the frames generated for it (pocket-tts allows (tokens / 3 + 2) s of them: 234 for 50 tokens; speech
# of 50 tokens takes about 100). 384 holds a 10 s voice, 50 tokens and 16 s of audio; a frame reads the
# cache's blocks up to its position, a prompt reads them all, so a prompt's cost grows with it.
DEFAULT_CAPACITY = 384
# A chunk's tokens at most: pocket-tts's MAX_TOKEN_PER_CHUNK (50) is where it splits; a sentence with
# no punctuation to split at can run longer.
MAX_TEXT_TOKENS = 128
# Tokens per call of prompt, at most: its activations' memory grows with them (english_18m: 25.1 MiB
# planned for 384, 5.5 for 128), so a long text chunk or a voice prompt above 5 s takes several calls.
PROMPT_TOKENS_PER_CALL = 64
# Frames of a voice prompt per call of encode_voice (80 ms each): its activations' memory, planned and
# XNNPACK's (english_2m: 9.2 + 6.6 MiB for 4 frames, 3.8 + 2.0 for 1), against about 1.5x the time
# (each call reads the encoder's weights again: a 4 s voice 487 ms against 330, english_2m, 1 thread).
VOICE_FRAMES_PER_CALL = 1
# The int8 decoder's calibration: frames the language model generates in a row after this many random
# text tokens (the scales of a streaming step depend on its state: the frames are fed in order).
CALIBRATION_FRAMES, CALIBRATION_TOKENS = 40, 20
DECODER_QUANTIZATION = ("int8",)


def load_tts_config(config: str):
    """pocket-tts's Config for a shipped config name, its weights and tokenizer paths cleared
    (they point at a hub this code does not reach: the caller gives files)."""
    _pocket_tts()
    from pocket_tts.utils.config import CONFIGS_DIR, load_config

    if config not in config_names():
        raise PhaseconvError(f"unknown pocket-tts config {config!r}; shipped: {', '.join(config_names())}")
    settings = load_config(CONFIGS_DIR / f"{config}.yaml")
    settings.weights_path = settings.weights_path_without_voice_cloning = None
    settings.flow_lm.weights_path = settings.mimi.weights_path = None
    return settings


def load_tokenizer(path: Path, n_bins: int):
    """pocket-tts's tokenizer for a sentencepiece `.model` or a tokenizers `.json` file, whose
    vocabulary must have the config's `n_bins` pieces."""
    from pocket_tts.modules.text_conditioner import build_tokenizer

    if not path.is_file():
        raise PhaseconvError(f"no such tokenizer file: {path}")
    kind = "tokenizers" if path.suffix == ".json" else "sentencepiece"
    try:
        return build_tokenizer(n_bins, str(path), kind)
    except AssertionError as error:  # pocket-tts asserts the vocabulary size
        raise PhaseconvError(f"{path}: {error} (the config's n_bins)") from None
    except Exception as error:
        raise PhaseconvError(f"{path} is not a {kind} tokenizer: {type(error).__name__}: {error}") from None


def build_tts(config: str = DEFAULT_TTS_CONFIG, weights: Path | None = None, tokenizer: Path | None = None, seed=0):
    """pocket-tts's TTSModel for a shipped config, built by its own code: random weights (seeded) or
    those of `weights` (the whole model's .safetensors: flow_lm.* and mimi.* keys), and the tokenizer
    of `tokenizer` (none: the model can run but not read text)."""
    _pocket_tts()
    from pocket_tts.models.tts_model import TTSModel

    settings = load_tts_config(config)
    torch.manual_seed(seed)
    # Its conditioner builds the tokenizer from the config's (hub) path: built here from the file given.
    with mock.patch("pocket_tts.modules.text_conditioner.build_tokenizer", lambda *args, **kwargs: None):
        tts = TTSModel._from_pydantic_config_with_weights(
            settings, settings.default_temperature, 1, None, settings.default_eos_threshold
        )
    if weights is not None:
        load_tts_weights(tts, weights, config)
    else:  # pocket-tts leaves it zero for its weights file to fill: random, or every voice would be silence
        projection = tts.flow_lm.speaker_proj_weight
        torch.nn.init.normal_(projection.data, std=projection.shape[1] ** -0.5)
    if tokenizer is not None:
        tts.flow_lm.conditioner.tokenizer = load_tokenizer(tokenizer, settings.flow_lm.lookup_table.n_bins)
    return tts.eval()


def load_tts_weights(tts: nn.Module, path: Path, config: str) -> None:
    """The whole TTSModel state dict from `path` (what pocket-tts's `weights_path` points to)."""
    import safetensors.torch

    if not path.is_file():
        raise PhaseconvError(f"no such weights file: {path}")
    try:
        state = safetensors.torch.load_file(path)
    except Exception as error:
        raise PhaseconvError(f"cannot read {path} as safetensors: {type(error).__name__}: {error}") from None
    check_state(tts.state_dict(), state, path, config)
    tts.load_state_dict(state, strict=True)


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


def settings_of(tts: nn.Module, config: str, capacity: int) -> dict:
    """What the runner reads from the program: the config's generation and text settings."""
    settings = tts.config
    return {
        "kind": "pocket-tts-tts",
        "voice_start": tts.flow_lm.insert_bos_before_voice,
        "voice_frames_per_call": VOICE_FRAMES_PER_CALL,
        "config": config,
        "capacity": capacity,
        "cache_block": CACHE_BLOCK,
        "max_text_tokens": MAX_TEXT_TOKENS,
        "prompt_tokens_per_call": min(PROMPT_TOKENS_PER_CALL, capacity),
        "n_bins": settings.flow_lm.lookup_table.n_bins,
        "latent_dim": tts.flow_lm.ldim,
        "sample_rate": tts.sample_rate,
        "frame_rate": settings.mimi.frame_rate,
        "frame_size": tts.mimi.frame_size,
        "temperature": settings.default_temperature,
        "eos_threshold": settings.default_eos_threshold,
        "noise_clamp": tts.noise_clamp,
        "frames_after_eos": settings.model_recommended_frames_after_eos,
        "pad_with_spaces_for_short_inputs": settings.pad_with_spaces_for_short_inputs,
        "remove_semicolons": settings.remove_semicolons,
        "append_terminal_punctuation": settings.append_terminal_punctuation,
        "capitalize_first_letter": settings.capitalize_first_letter,
        "replace_characters": settings.replace_characters,
    }


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
    "reset_decoder": ["decode"],
    "clear_cache": ["prompt", "generate"],  # generate_0, generate_1, ...: one per cache block
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
    """The decode method in static int8 (phaseconv.quantize), calibrated on the language model's own
    latents in order; the decoder's last residual block stays fp32 (MimiStep.output_block)."""
    from phaseconv.quantize import quantize

    calibration = [(latent,) for latent in lm_latents(tts)]
    return quantize(program, calibration, keep_float=[f"decoder.{decode.decoder.output_block()}"])


def tts_programs(
    tts: nn.Module,
    config: str,
    capacity: int = DEFAULT_CAPACITY,
    quantize: str | None = None,
    quantize_decoder: str | None = None,
) -> tuple[dict[str, ExportedProgram], dict]:
    """The exported methods of the text-to-speech program, and its settings; `quantize` (8da4w or
    8da8w) quantizes the language model's linear layers, `quantize_decoder` (int8) the decode method."""
    if quantize_decoder not in (None, *DECODER_QUANTIZATION):
        known = ", ".join(DECODER_QUANTIZATION)
        raise PhaseconvError(f"the decoder's quantization is one of {known}, got {quantize_decoder!r}")
    flow_lm = with_cache(tts.flow_lm, capacity)
    if quantize is not None:
        quantize_linears(flow_lm, quantize)
    decode, voice = Decode(tts, MimiStep(tts.mimi)), EncodeVoice(tts)
    dim, ldim, frame = flow_lm.dim, flow_lm.ldim, tts.mimi.frame_size
    tokens = Dim("tokens", min=1, max=MAX_TEXT_TOKENS)
    positions = Dim("positions", min=1, max=min(PROMPT_TOKENS_PER_CALL, capacity))
    one, latent, noise = torch.zeros(1), torch.zeros(1, 1, ldim), torch.zeros(1, ldim)
    methods = {
        "embed_text": (EmbedText(tts), (torch.zeros(1, 5, dtype=torch.long),), ({1: tokens},)),
        "voice_start": (VoiceStart(tts), (), None),
        "encode_voice": (voice, (torch.zeros(1, 1, VOICE_FRAMES_PER_CALL * frame),), None),
        "reset_encoder": (ResetState(voice.encoder, "encoder"), (), None),
        "prompt": (
            Prompt(flow_lm),
            (torch.zeros(1, 5, dim), torch.arange(5)),
            ({1: positions}, {0: positions}),
        ),
        **{  # one per cache block, its example position the block's first
            f"generate_{block}": (Generate(flow_lm, block), (latent, one, noise, torch.tensor([first])), None)
            for block, first in enumerate(block_starts(cache_blocks(flow_lm)))
        },
        "clear_cache": (ClearCache(flow_lm), (), None),
        "decode": (decode, (latent,), None),
        "reset_decoder": (ResetState(decode.decoder, "decoder"), (), None),
    }
    programs = {}
    with torch.no_grad(), _fresh_mask_cache():
        for name, (module, inputs, dynamic_shapes) in methods.items():
            programs[name] = torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes)
        if quantize_decoder is not None:
            programs["decode"] = quantized_decode(programs["decode"], tts, decode)
    assert capacity_of(flow_lm) == capacity
    for resetting, running in RESETS.items():
        missing = written_buffers(programs, running) - written_buffers(programs, [resetting])
        assert not missing, f"{resetting} leaves {sorted(missing)} of {running} as they were"
    return programs, settings_of(tts, config, capacity) | {"quantize": quantize, "quantize_decoder": quantize_decoder}


def settings_json(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)


def lower_tts(
    config: str,
    weights: Path | None = None,
    tokenizer: Path | None = None,
    capacity: int = DEFAULT_CAPACITY,
    quantize: str | None = None,
    quantize_decoder: str | None = None,
    rewrite: bool = True,
    external_constants: bool = False,
    target: str = "any",
):
    """The text-to-speech program of a pocket-tts config, lowered: a LoweredProgram of its methods."""
    from phaseconv.lowering import lower

    if capacity < 16:
        raise PhaseconvError(f"--capacity {capacity}: the language model needs room for a prompt and frames")
    tts = build_tts(config, weights, tokenizer)
    programs, settings = tts_programs(tts, config, capacity, quantize, quantize_decoder)
    return lower(
        programs,
        rewrite=rewrite,
        external_constants=external_constants,
        target=target,
        constant_methods={"settings": settings_json(settings)},
    )
