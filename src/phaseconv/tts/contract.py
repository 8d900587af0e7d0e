"""The text-to-speech program's contract: its methods, their inputs and outputs, and the settings it
carries. A runner in any language follows this module: `phaseconv.tts.speaker` does, and the C++
runner reads `runner/src/contract.h`, which `render_header()` writes from it (a test fails when the
two differ).

A runner speaks an utterance in pocket-tts's order of calls:

    clear_cache()                                  the KV cache to zeros (it must hold numbers)
    the voice, at positions 0 .. V - 1, once:
      a state (voice_NAME() or a .safetensors)  -> load_voice(state part, positions), VOICE_POSITIONS a call
      or audio                                  -> reset_encoder(); encode_voice(frame) per 1920 samples;
                                                   prompt_b([voice_start(), encoded frames], positions)
    per chunk of text, T tokens:
      reset_decoder()
      embed_text(tokens) -> prompt_b(embeddings, positions V .. ), PROMPT_TOKENS a call, but the last
      call: first_frame_b(its embeddings, its positions .. V + T - 1 and V + T, noise) -> the first
      frame's latent, eos logit (b: the first in `prompt_blocks` with last position // cache_block <= b)
      per frame after it at position p = V + T + step: generate_b (the first b in `generate_blocks`
      with p // cache_block <= b) -> latent, eos logit; decode(latent) -> 80 ms of PCM, or N latents
      at once, decode_N (N in `decode_frames`), when both runners' rule says
      (phaseconv.tts.decoding.decode_size, and decode_size in the C++ runner's decoder.h)

A call of a fixed size (load_voice, read_voice) takes fewer positions padded with PAD (their inputs
anything); prompt_b takes as many tokens as there are (its size is dynamic: padding would cost time).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

VERSION = 5
KIND = "pocket-tts-tts"
# Tokens per call of prompt at most, positions per call of load_voice and read_voice.
PROMPT_TOKENS = 32
VOICE_POSITIONS = 64
# A position no cache block holds: a padded token's keys and values go to spill slots no query reads.
PAD = 2**24


@dataclass(frozen=True)
class Method:
    name: str
    inputs: str
    outputs: str
    does: str


METHODS = (
    Method("settings", "", "JSON string", "this record (Settings)"),
    Method("tokenizer", "", "uint8 [bytes]", "the config's tokenizer file (settings.tokenizer: its kind)"),
    Method("embed_text", "tokens int64 [1, T], T <= max_text_tokens", "[1, T, dim]", "the text conditioning"),
    Method("voice_start", "", "[1, 1, dim]", "the conditioning before an audio voice (when settings.voice_start)"),
    Method("reset_encoder", "", "[1]", "the voice encoder's state to its start"),
    Method("encode_voice", "audio [1, 1, frame_size]", "[1, 1, dim]", "one frame of an audio voice, encoded"),
    Method(
        "prompt_B",
        f"embeddings [1, T, dim], positions int64 [T], 1 <= T <= {PROMPT_TOKENS}",
        "[1, dim]",
        "conditioning into the cache at positions in blocks 0 .. B (B in settings.prompt_blocks)",
    ),
    Method(
        "first_frame_B",
        f"embeddings [1, T, dim], positions int64 [T + 1], noise [1, latent_dim], 1 <= T <= {PROMPT_TOKENS}",
        "latent [1, 1, latent_dim], eos_logit [1, 1]",
        "a chunk's last text tokens, as prompt_B, then its first frame (generate_B's, from the start) "
        "at the last position, in one call",
    ),
    Method(
        "load_voice",
        f"state [layers, 2, {VOICE_POSITIONS}, kv_heads, head_dim], positions int64 [{VOICE_POSITIONS}]",
        "[1]",
        "a voice state (keys, then values, per layer) into the cache",
    ),
    Method(
        "read_voice",
        f"positions int64 [{VOICE_POSITIONS}]",
        f"[layers, 2, {VOICE_POSITIONS}, kv_heads, head_dim]",
        "the cache at the positions, as load_voice takes it",
    ),
    Method("clear_cache", "", "[1]", "every slot of the cache to zero"),
    Method(
        "generate_B",
        "latent [1, 1, latent_dim], start [1], noise [1, latent_dim], positions int64 [1]",
        "latent [1, 1, latent_dim], eos_logit [1, 1]",
        "one frame at a position in cache blocks A .. B, the only ones it writes (B in "
        "settings.generate_blocks, A the ladder's previous B + 1), reading blocks 0 .. B",
    ),
    Method("reset_decoder", "", "[1]", "the decoder's state to its start"),
    Method("decode", "latent [1, 1, latent_dim]", "pcm [1, 1, frame_size]", "one frame of audio"),
    Method(
        "decode_N",
        "latents [1, N, latent_dim]",
        "pcm [1, 1, N * frame_size]",
        "N frames at once, as N calls of decode (N in settings.decode_frames)",
    ),
    Method("voice_NAME", "", "state [layers, 2, V, kv_heads, head_dim]", "a built-in voice (settings.voices)"),
)


def generate_method(block: int) -> str:
    return f"generate_{block}"


def prompt_method(block: int) -> str:
    return f"prompt_{block}"


def first_frame_method(block: int) -> str:
    return f"first_frame_{block}"


def voice_method(name: str) -> str:
    return f"voice_{name}"


def decode_method(frames: int) -> str:
    return "decode" if frames == 1 else f"decode_{frames}"


@dataclass(frozen=True)
class Settings:
    """What a runner needs to know of a program: the model's shapes, pocket-tts's generation and text
    settings for its config, and what the program holds (voices, tokenizer, precision)."""

    config: str
    weights: str  # where the weights came from, in words
    voice_cloning: bool  # audio voices allowed (pocket-tts: the voice-cloning weights)
    # the cache
    capacity: int
    cache_block: int
    generate_blocks: list[int]
    prompt_blocks: list[int]
    # the model
    layers: int
    kv_heads: int
    head_dim: int
    dim: int
    latent_dim: int
    n_bins: int
    voice_start: bool
    sample_rate: int
    frame_rate: float
    frame_size: int
    # generation, as pocket-tts's TTSModel does it for the config
    temperature: float
    eos_threshold: float
    noise_clamp: float | None
    frames_after_eos: int | None
    min_frames_before_eos: int
    max_tokens_per_chunk: int
    tokens_per_second: float
    gen_seconds_padding: float
    max_voice_seconds: float
    # text, as pocket-tts prepares it for the config
    pad_with_spaces_for_short_inputs: bool
    remove_semicolons: bool
    append_terminal_punctuation: bool
    capitalize_first_letter: bool
    replace_characters: dict[str, str]
    # what the program holds
    tokenizer: str | None  # "sentencepiece" or "tokenizers": the kind of the tokenizer method's file
    voices: dict[str, int]  # built-in voice -> positions its state takes
    default_voice: str | None
    quantize: str | None
    quantize_decoder: str | None
    max_text_tokens: int
    prompt_tokens: int = PROMPT_TOKENS
    voice_positions: int = VOICE_POSITIONS
    pad: int = PAD
    kind: str = KIND
    version: int = VERSION
    decode_frames: list[int] = field(default_factory=lambda: [1])

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str = "the program") -> Settings:
        data = json.loads(text)
        if data.get("kind", KIND) != KIND:
            raise ValueError(f"{source} is a {data.get('kind')} program, not a text-to-speech program")
        if data.get("version", 1) != VERSION:
            raise ValueError(
                f"{source} was lowered by another phaseconv (program version {data.get('version', 1)}, this "
                f"runner reads {VERSION}): lower it again with `phaseconv lower pocket-tts-tts:CONFIG`"
            )
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def max_generated_frames(self, tokens: int) -> int:
        """pocket-tts's `_estimate_max_gen_len`: the frames a chunk of `tokens` may take at most."""
        seconds = tokens / self.tokens_per_second + self.gen_seconds_padding
        return math.ceil(seconds * self.frame_rate)

    def block_for(self, ladder: list[int], position: int) -> int:
        """The method of a ladder (generate_blocks, prompt_blocks) for `position`: the first that reads its block."""
        return next(b for b in ladder if b >= position // self.cache_block)

    def generate_block(self, position: int) -> int:
        """The generate method's block for a frame at `position`."""
        return self.block_for(self.generate_blocks, position)

    def prompt_block(self, last: int) -> int:
        """The prompt method's block for a call whose last position is `last`."""
        return self.block_for(self.prompt_blocks, last)


def settings_keys() -> list[str]:
    return [f.name for f in fields(Settings)]


def render_header() -> str:
    """The contract as a C++ header: method names, fixed sizes and the settings' keys."""
    lines = [
        "// Generated by `python -m phaseconv.tts.contract` from src/phaseconv/tts/contract.py: do not edit.",
        "#pragma once",
        "#include <cstdint>",
        "",
        "namespace phaseconv::contract {",
        f"constexpr int kVersion = {VERSION};",
        f'constexpr const char* kKind = "{KIND}";',
        f"constexpr int64_t kPromptTokens = {PROMPT_TOKENS};",
        f"constexpr int64_t kVoicePositions = {VOICE_POSITIONS};",
        f"constexpr int64_t kPad = {PAD};",
        "",
        "namespace method {",
    ]
    for method in METHODS:  # a name ending in a placeholder: its prefix (generate_, voice_, decode_)
        prefix, _, placeholder = method.name.rpartition("_")
        if not placeholder.isupper():
            prefix, placeholder = method.name, ""
        symbol = "".join(part.capitalize() for part in prefix.split("_")) + ("Frames" if placeholder == "N" else "")
        value = prefix + ("_" if placeholder else "")
        lines.append(f'constexpr const char* k{symbol} = "{value}";  // {method.does}')
    lines += ["}  // namespace method", "", "namespace key {"]
    for name in settings_keys():
        symbol = "".join(part.capitalize() for part in name.split("_"))
        lines.append(f'constexpr const char* k{symbol} = "{name}";')
    lines += ["}  // namespace key", "}  // namespace phaseconv::contract", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_header(), end="")
