"""Speak text through a text-to-speech program (`phaseconv lower pocket-tts-tts:CONFIG`), streamed.

The runner does what pocket-tts's `TTSModel.generate_audio_stream` does, with every model call made
by the program's methods in the contract's order (contract.py) and pocket-tts's own code for the
rest: text normalization and chunking (`split_into_best_sentences`, `prepare_text_prompt`), the
tokenizer (the program's own file), reading and resampling an audio voice, the noise (normal, or
truncated normal with `noise_clamp`, std sqrt(temperature)) and the end-of-speech rule (the EOS logit
above the threshold, not before frame 6, then `frames_after_eos` more frames). Noise is drawn in
pocket-tts's order from a generator seeded with `seed`, so the same seed gives the same audio, and
pocket-tts's with `torch.manual_seed(seed)`.

A chunk never stops at the end of the cache: one that would not fit the cache with the voice and all
the frames pocket-tts allows it is split at words into chunks that do.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from phaseconv.errors import PhaseconvError
from phaseconv.tts.contract import PAD
from phaseconv.tts.decoding import InlineDecoder
from phaseconv.tts.loaded import SpeechProgram
from phaseconv.tts.voices import AudioVoice, read_state

MAX_TOKEN_PER_CHUNK = 50  # pocket-tts's default_parameters.MAX_TOKEN_PER_CHUNK


def _pocket_tts_text():
    try:
        from pocket_tts.models import text_chunking
    except ImportError:
        raise PhaseconvError("phaseconv tts reads text as pocket-tts does: `pip install pocket-tts`") from None
    return text_chunking


@dataclass
class SpeechReport:
    """What a listener notices: how soon the first audio comes, and what each frame costs."""

    frames: int
    chunks: int
    sample_rate: int
    samples_per_frame: int
    load_ms: float
    first_audio_ms: float = 0.0  # from the text (and the voice already in the cache) to the first PCM frame
    voice_ms: float = 0.0  # putting the voice in the cache, once per utterance
    reset_ms: float = 0.0  # the decoder's reset before a chunk (median)
    voice: str = "none"  # which voice, in words
    eos_frames: list[int | None] = field(default_factory=list)  # per chunk: the frame EOS was seen at
    split_chunks: int = 0  # chunks split at words to fit the cache with the voice
    decode_calls: int = 0  # calls of the decoder: fewer than frames where it decoded several at once
    lm_ms: list[float] = field(repr=False, default_factory=list)
    decode_ms: list[float] = field(repr=False, default_factory=list)
    prompt_ms: list[float] = field(repr=False, default_factory=list)
    total_ms: float = 0.0

    @property
    def audio_seconds(self) -> float:
        return self.frames * self.samples_per_frame / self.sample_rate

    @property
    def real_time_factor(self) -> float:
        """Generation time (text in to last PCM out, voice prompt excluded) over the audio's duration."""
        return self.total_ms / 1e3 / self.audio_seconds if self.frames else math.inf

    def to_dict(self) -> dict:
        data = asdict(self)
        for name in ("lm_ms", "decode_ms", "prompt_ms"):
            values = data.pop(name)
            data[f"{name.removesuffix('_ms')}_median_ms"] = statistics.median(values) if values else None
        return {**data, "audio_seconds": self.audio_seconds, "real_time_factor": self.real_time_factor}


def padded(values: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """`values` with zeros after it along `dim` up to `size`."""
    missing = size - values.shape[dim]
    if missing == 0:
        return values
    shape = list(values.shape)
    shape[dim] = missing
    return torch.cat([values, values.new_zeros(shape)], dim=dim)


def positions(first: int, count: int, size: int) -> torch.Tensor:
    """first .. first + count - 1, then PAD up to `size`."""
    return torch.cat([torch.arange(first, first + count), torch.full((size - count,), PAD)])


class Speaker:
    """Text to PCM through a SpeechProgram, in pocket-tts's order of calls (see the module docstring)."""

    def __init__(
        self,
        program: SpeechProgram,
        temperature: float | None = None,
        seed: int = 0,
        eos_threshold: float | None = None,
    ):
        """`eos_threshold`: the end-of-speech logit past which a chunk ends, instead of the config's."""
        self.program, self.settings = program, program.settings
        if eos_threshold is not None:
            self.settings = dataclasses.replace(self.settings, eos_threshold=eos_threshold)
        self.tokenizer = program.tokenizer()
        self.temperature = self.settings.temperature if temperature is None else temperature
        if self.temperature < 0:
            raise PhaseconvError(f"the temperature must be 0 or more, got {self.temperature}")
        self.generator = torch.Generator().manual_seed(seed)
        self.voice_positions = 0  # the positions the voice holds
        self.max_tokens = MAX_TOKEN_PER_CHUNK  # pocket-tts's generate(max_tokens=...): a chunk's tokens at most
        self.frames_after_eos: int | None = None  # instead of the config's (or its guess per chunk)

    def noise(self) -> torch.Tensor:
        """One draw of the flow's starting point, as FlowLMModel.forward draws it."""
        from phaseconv.models.pocket_tts.language_model import draw_noise

        s = self.settings
        return draw_noise(self.generator, s.latent_dim, self.temperature, s.noise_clamp)

    def _room(self, first: int, count: int) -> None:
        if first + count > self.settings.capacity:
            raise PhaseconvError(
                f"the voice and text need positions up to {first + count}; the program holds {self.settings.capacity} "
                "(lower it with a larger --capacity, or use a shorter voice)"
            )

    def prompt(self, embeddings: torch.Tensor, first: int) -> None:
        """Conditioning into the cache at first, first + 1, ...; a prompt call draws noise in pocket-tts."""
        self._room(first, embeddings.shape[1])
        self._condition(embeddings, first)
        self.noise()

    def _condition(self, embeddings: torch.Tensor, first: int) -> None:
        size = self.settings.prompt_tokens
        for start in range(0, embeddings.shape[1], size):
            part = embeddings[:, start : start + size]
            last = first + start + part.shape[1] - 1
            self.program.prompt(part, torch.arange(first + start, last + 1), last)

    def prompt_text(self, embeddings: torch.Tensor, first: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A chunk's text into the cache at first, first + 1, ..., T - 1, as `prompt`, and its first frame
        at first + T: the last call of the prompt (first_frame_B) runs the frame too. Returns the frame's
        latent and EOS logit; the noise drawn as pocket-tts draws it, the prompt's, then the frame's."""
        count = embeddings.shape[1]
        self._room(first, count)
        head = (count - 1) // self.settings.prompt_tokens * self.settings.prompt_tokens  # the calls before the last
        self._condition(embeddings[:, :head], first)
        self.noise()
        positions = torch.arange(first + head, first + count + 1)
        return self.program.first_frame(embeddings[:, head:], positions, self.noise())

    def load_state(self, state: torch.Tensor) -> None:
        """A voice state [layers, 2, V, H_kv, D] into the cache at positions 0 .. V - 1."""
        s = self.settings
        expected = (s.layers, 2, s.kv_heads, s.head_dim)
        if state.dim() != 5 or (state.shape[0], state.shape[1], state.shape[3], state.shape[4]) != expected:
            raise PhaseconvError(
                f"the voice state has shape {list(state.shape)}; {s.config}'s language model takes "
                f"[{s.layers}, 2, positions, {s.kv_heads}, {s.head_dim}] (a voice of another model?)"
            )
        count, size = state.shape[2], s.voice_positions
        self._room(0, count)
        for start in range(0, count, size):
            part = state[:, :, start : start + size]
            self.program.load_voice(padded(part, size, 2).contiguous(), positions(start, part.shape[2], size))

    def set_voice(self, voice: str | Path | AudioVoice | None) -> tuple[float, str]:
        """Put the voice in the cache: a built-in voice's name, a .safetensors voice state, an audio
        voice (AudioVoice), or none (the model's unconditioned start). Returns the milliseconds it
        took and the voice in words."""
        if isinstance(voice, str):
            return self.set_state(self.program.builtin_voice(voice), f"{voice} (built in)")
        if isinstance(voice, Path):
            return self.set_state(read_state(voice), f"{voice.name} (voice state)")
        start = time.perf_counter()
        self.program.clear_cache()  # the cache holds numbers from here on
        self.voice_positions = 0
        if isinstance(voice, AudioVoice):
            self._encode(voice)
            said = voice.described
        else:
            said = "none"
        return (time.perf_counter() - start) * 1e3, said

    def set_state(self, state: torch.Tensor, said: str = "a voice state") -> tuple[float, str]:
        """A voice state [layers, 2, V, H_kv, D] in the cache at positions 0 .. V - 1, and nothing else."""
        start = time.perf_counter()
        self.program.clear_cache()
        self.voice_positions = 0
        self.load_state(state)
        self.voice_positions = state.shape[2]
        return (time.perf_counter() - start) * 1e3, said

    def _encode(self, voice: AudioVoice) -> None:
        """An audio voice through Mimi's encoder, then prompted: pocket-tts's get_state_for_audio_prompt."""
        s = self.settings
        self.program.reset_encoder()
        step = s.frame_size
        encoded = [
            self.program.encode_voice(voice.audio[..., i : i + step])[0] for i in range(0, voice.audio.shape[-1], step)
        ]
        prefix = [self.program.voice_start()[0]] if s.voice_start else []
        conditioning = torch.cat([*prefix, *encoded], dim=1)
        self.prompt(conditioning, 0)
        self.voice_positions = conditioning.shape[1]

    def voice_state(self) -> torch.Tensor:
        """The voice in the cache, as a state [layers, 2, V, H_kv, D] (what `export-voice` writes)."""
        size = self.settings.voice_positions
        parts = []
        for start in range(0, self.voice_positions, size):
            count = min(size, self.voice_positions - start)
            (state,) = self.program.read_voice(positions(start, count, size).clamp(max=self.settings.capacity - 1))
            parts.append(state[:, :, :count])
        return torch.cat(parts, dim=2)

    def _options(self) -> tuple:
        s = self.settings
        return (
            s.pad_with_spaces_for_short_inputs,
            s.remove_semicolons,
            s.append_terminal_punctuation,
            s.capitalize_first_letter,
            s.replace_characters,
        )

    def _fits(self, tokens: int) -> bool:
        s = self.settings
        return (
            tokens <= s.max_text_tokens and self.voice_positions + tokens + s.max_generated_frames(tokens) <= s.capacity
        )

    def _count(self, text: str) -> int:
        chunk, _ = _pocket_tts_text().prepare_text_prompt(text, *self._options())
        return self.tokenizer(chunk).shape[1]

    def _fitting(self, piece: str) -> list[str]:
        """`piece`, or its words in as few runs as fit the cache with the voice."""
        if self._fits(self._count(piece)):
            return [piece]
        parts, current = [], []
        for word in piece.split():
            if current and not self._fits(self._count(" ".join([*current, word]))):
                parts.append(" ".join(current))
                current = []
            if not self._fits(self._count(word)):
                raise PhaseconvError(
                    f"the voice takes {self.voice_positions} of the program's {self.settings.capacity} positions: "
                    f"no room for {word!r} and its frames (lower it with a larger --capacity, or use a shorter voice)"
                )
            current.append(word)
        return [*parts, " ".join(current)]

    def chunks(self, text: str) -> list[tuple[str, int, bool]]:
        """The text as pocket-tts splits and prepares it: (prepared chunk, frames to generate after EOS,
        split), a chunk too long for the cache split at words."""
        text_chunking, options = _pocket_tts_text(), self._options()
        if not text.strip():
            raise PhaseconvError("the text is empty")
        try:
            pieces = text_chunking.split_into_best_sentences(self.tokenizer, text, self.max_tokens, *options)
        except ValueError as error:  # pocket-tts: "Text prompt cannot be empty" (all characters removed)
            raise PhaseconvError(f"nothing to say in {text!r}: {error}") from None
        prepared = []
        for piece in pieces:
            parts = self._fitting(piece)
            for part in parts:
                chunk, guess = text_chunking.prepare_text_prompt(part, *options)
                after = self.settings.frames_after_eos if self.frames_after_eos is None else self.frames_after_eos
                prepared.append((chunk, after if after is not None else guess + 2, len(parts) > 1))
        return prepared

    def unknown_characters(self, text: str) -> list[str]:
        """The characters of `text` the tokenizer reads as its unknown piece (pocket-tts speaks them so)."""
        unknown = _unknown_id(self.tokenizer)
        if unknown is None:
            return []
        text = text.translate(str.maketrans(self.settings.replace_characters))  # as pocket-tts prepares it
        return sorted({c for c in text if not c.isspace() and unknown in self.tokenizer.encode(c)})

    def speak(
        self, text: str | list, on_frame: Callable[[torch.Tensor], None], report: SpeechReport, decoder=None
    ) -> None:
        """Generate and decode every chunk of `text` (or the chunks `chunks(text)` gave), handing each
        frame's samples to `on_frame`; the decoder is the program's own (frame after frame) unless
        another is given (DecoderProcess)."""
        s = self.settings
        chunks = self.chunks(text) if isinstance(text, str) else text
        started = time.perf_counter()
        decoder = decoder or InlineDecoder(self.program)
        fade = torch.linspace(0, 1, s.sample_rate // 200)  # pocket-tts's decoder worker's 5 ms fade-in

        def deliver(pcm: torch.Tensor, first_of_chunk: bool, decode_ms: float, first_of_call: bool = True) -> None:
            pcm = pcm.reshape(-1)
            report.decode_calls += first_of_call
            if first_of_chunk:
                pcm[: fade.numel()] *= fade
            if report.frames == 0:
                report.first_audio_ms = (time.perf_counter() - started) * 1e3
            report.frames += 1
            report.decode_ms.append(decode_ms)
            on_frame(pcm)

        decoder.start(deliver)
        for chunk, frames_after_eos, split in chunks:
            report.split_chunks += split
            tokens = self.tokenizer(chunk)
            report.reset_ms = decoder.reset()
            start = time.perf_counter()
            (embeddings,) = self.program.embed_text(tokens)
            frame = self.prompt_text(embeddings, self.voice_positions)
            report.prompt_ms.append((time.perf_counter() - start) * 1e3)
            first = self.voice_positions + tokens.shape[1]
            self._generate(first, frame, frames_after_eos, tokens.shape[1], decoder, report)
            report.chunks += 1
        decoder.finish()
        report.total_ms = (time.perf_counter() - started) * 1e3

    def _generate(self, first, frame, frames_after_eos, token_count, decoder, report) -> None:
        """pocket-tts's `_autoregressive_generation` from the first frame on (`frame`: its latent and EOS
        logit, from the prompt's last call): each latent handed to the decoder as it comes."""
        s = self.settings
        latent, eos_logit = frame
        eos_frame = None
        for step in range(s.max_generated_frames(token_count)):
            if step > 0:
                begin = time.perf_counter()
                latent, eos_logit = self.program.generate(latent, torch.zeros(1), self.noise(), first + step)
                report.lm_ms.append((time.perf_counter() - begin) * 1e3)
            if float(eos_logit) > s.eos_threshold and eos_frame is None and step >= s.min_frames_before_eos:
                eos_frame = step
            if eos_frame is not None and step >= eos_frame + frames_after_eos:
                break
            decoder.decode(latent, first_of_chunk=step == 0)
        report.eos_frames.append(eos_frame)


def _unknown_id(tokenizer) -> int | None:
    """The id of the tokenizer's unknown piece (pocket-tts's SentencePieceTokenizer or JsonTokenizer)."""
    if hasattr(tokenizer, "sp"):
        return tokenizer.sp.unk_id()
    model = tokenizer.tokenizer.model
    token = getattr(model, "unk_token", None)
    return tokenizer.tokenizer.token_to_id(token) if token else None
