"""pocket-tts's Python API on a text-to-speech program: `TTSModel`, with pocket-tts's method names and
meaning, so that pocket-tts's usage runs on the program with its import and load lines changed.

    from phaseconv.tts import TTSModel
    tts_model = TTSModel.load_model("tts.pte")
    voice_state = tts_model.get_state_for_audio_prompt("alba")  # a name, a .safetensors, audio, a URL
    audio = tts_model.generate_audio(voice_state, "Hello world.")  # 1-D float tensor at sample_rate
    for chunk in tts_model.generate_audio_stream(voice_state, text, stop=event): ...

A voice state is a value (`VoiceState`): the language model's cache after the voice's prompt, kept,
reused by any number of calls and saved as pocket-tts's `export_model_state` writes it. Each call
puts it in the program's cache first; nothing of one call reaches the next.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from phaseconv.errors import PhaseconvError
from phaseconv.tts.loaded import SpeechProgram
from phaseconv.tts.speaker import MAX_TOKEN_PER_CHUNK, Speaker, SpeechReport
from phaseconv.tts.voices import AudioVoice, read_state, write_state

URL_SCHEMES = ("http://", "https://", "hf://")


@dataclass(frozen=True)
class VoiceState:
    """A voice: the cache [layers, 2, positions, kv_heads, head_dim] its prompt leaves, and what it is."""

    cache: torch.Tensor
    described: str

    @property
    def positions(self) -> int:
        return self.cache.shape[2]


def export_model_state(model_state: VoiceState, dest: str | Path) -> None:
    """The voice state as pocket-tts's `export_model_state` writes it (a `.safetensors` file)."""
    write_state(model_state.cache, Path(dest))


def fetched(url: str) -> Path:
    """A voice file at a URL, through pocket-tts's own download (the Hugging Face cache for hf://)."""
    from pocket_tts.utils.utils import download_if_necessary

    try:
        return Path(download_if_necessary(url))
    except Exception as error:
        raise PhaseconvError(f"cannot fetch {url}: {type(error).__name__}: {error}") from None


class UnknownVoice(PhaseconvError):
    """A voice that is none of the program's built-in voices and no file."""

    def __init__(self, name: str, carried: str):
        super().__init__(
            f"no voice {name!r}: the program's built-in voices are {carried} (`phaseconv tts PROGRAM "
            "--list-voices`); a voice is also a .safetensors voice state, an audio file or its URL"
        )
        self.name, self.carried = name, carried


class _Stopped(Exception):
    """The stream's consumer asked for no more frames."""


class TTSModel:
    """A text-to-speech program (`phaseconv lower pocket-tts-tts:CONFIG`) with pocket-tts's TTSModel API.

    One utterance at a time: a model is not thread-safe (as pocket-tts's is not)."""

    def __init__(
        self, program: SpeechProgram, temp: float | None = None, eos_threshold: float | None = None, seed: int = 0
    ):
        """`seed`: the noise's (pocket-tts draws from torch's global generator; here each model has its own)."""
        self.program = program
        self.speaker = Speaker(program, temp, seed, eos_threshold)
        self.temp = self.speaker.temperature

    @classmethod
    def load_model(
        cls,
        program: str | Path,
        temp: float | None = None,
        eos_threshold: float | None = None,
        tokenizer: str | Path | None = None,
        seed: int = 0,
    ) -> TTSModel:
        """The program at `program`; `temp` and `eos_threshold` as pocket-tts's load_model takes them
        (default: the config's); `tokenizer`: a tokenizer file instead of the program's own."""
        path = Path(program)
        if not path.is_file():
            raise PhaseconvError(f"no such program: {path} (make one with `phaseconv lower pocket-tts-tts:CONFIG`)")
        tokenizer = None if tokenizer is None else Path(tokenizer)
        return cls(SpeechProgram(path, tokenizer=tokenizer), temp, eos_threshold, seed)

    @property
    def sample_rate(self) -> int:
        return self.program.settings.sample_rate

    @property
    def voices(self) -> list[str]:
        """The program's built-in voices."""
        return self.program.voices

    def get_state_for_audio_prompt(
        self, audio_conditioning: str | Path | torch.Tensor | VoiceState, truncate: bool = False
    ) -> VoiceState:
        """The voice state of a built-in voice's name, a `.safetensors` voice state, an audio file (a
        path, or an http(s):// or hf:// URL) or audio [channels, samples] at `sample_rate`, to clone.
        Audio longer than the program's cache holds is cut as pocket-tts's truncate=True cuts it
        (its first 30 s), whatever `truncate` says."""
        if isinstance(audio_conditioning, VoiceState):
            return audio_conditioning
        if isinstance(audio_conditioning, torch.Tensor):
            self._require_cloning()
            s = self.program.settings
            audio = audio_conditioning.float().reshape(-1, audio_conditioning.shape[-1]).mean(0, keepdim=True)
            return self.state_for(AudioVoice.of(audio, s.sample_rate, s.sample_rate, s.frame_size))
        return self.state_for(self.find_voice(str(audio_conditioning)))

    def find_voice(self, voice: str) -> str | VoiceState | AudioVoice:
        """What `voice` names, read without running the program: a built-in voice's name, a voice
        state, or audio to clone (state_for makes it a voice state). UnknownVoice for a name that is
        none of the program's voices and no file."""
        s = self.program.settings
        if voice in s.voices:
            return voice
        path = fetched(voice) if voice.startswith(URL_SCHEMES) else Path(voice)
        if not path.is_file():
            if path.suffix or "/" in voice:
                raise PhaseconvError(f"no such voice file: {voice}")
            raise UnknownVoice(voice, ", ".join(sorted(s.voices)) or "none")
        if path.suffix == ".safetensors":
            return VoiceState(read_state(path), f"{path.name} (voice state)")
        self._require_cloning()
        return AudioVoice.read(path, s.sample_rate, s.frame_size)

    def state_for(self, voice: str | VoiceState | AudioVoice) -> VoiceState:
        """The voice state of what find_voice gave: an audio voice is encoded by the program."""
        if isinstance(voice, str):
            return VoiceState(self.program.builtin_voice(voice), f"{voice} (built in)")
        if isinstance(voice, AudioVoice):
            self.speaker.set_voice(voice)
            return VoiceState(self.speaker.voice_state(), voice.described)
        return voice

    def empty_state(self) -> VoiceState:
        """No voice: the language model's unconditioned start (a cache of no positions)."""
        s = self.program.settings
        return VoiceState(torch.zeros(s.layers, 2, 0, s.kv_heads, s.head_dim), "none")

    def _require_cloning(self) -> None:
        if not self.program.settings.voice_cloning:
            from pocket_tts.models.tts_model import VOICE_CLONING_UNSUPPORTED

            raise PhaseconvError(" ".join(VOICE_CLONING_UNSUPPORTED.split()))

    def generate_audio(
        self,
        model_state: VoiceState,
        text_to_generate: str,
        max_tokens: int = MAX_TOKEN_PER_CHUNK,
        frames_after_eos: int | None = None,
        copy_state: bool = True,
    ) -> torch.Tensor:
        """The whole utterance: a 1-D float tensor at `sample_rate`. `copy_state` is pocket-tts's; a
        VoiceState is never changed by speaking."""
        frames = []
        self.speak(model_state, text_to_generate, max_tokens, frames_after_eos)(lambda pcm: frames.append(pcm.clone()))
        return torch.cat(frames)

    def generate_audio_stream(
        self,
        model_state: VoiceState,
        text_to_generate: str,
        max_tokens: int = MAX_TOKEN_PER_CHUNK,
        frames_after_eos: int | None = None,
        copy_state: bool = True,
        stop: threading.Event | None = None,
    ) -> Iterator[torch.Tensor]:
        """Each frame's audio as it is decoded (1-D, `sample_rate`), the language model and decoder on
        a thread of their own. `stop`: once set, no frame is yielded and the generation ends at its
        next frame; a consumer that leaves the loop ends it too."""
        run = self.speak(model_state, text_to_generate, max_tokens, frames_after_eos)
        frames: queue.Queue = queue.Queue()
        stop = stop or threading.Event()
        leaving = threading.Event()

        def on_frame(pcm: torch.Tensor) -> None:
            if stop.is_set() or leaving.is_set():
                raise _Stopped
            frames.put(pcm.clone())

        def work() -> None:
            try:
                run(on_frame)
            except _Stopped:
                pass
            except BaseException as error:  # said to the consumer, in its thread
                frames.put(error)
            frames.put(None)

        worker = threading.Thread(target=work, name="phaseconv-tts-stream", daemon=True)
        worker.start()
        try:
            while (item := frames.get()) is not None and not stop.is_set():
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            leaving.set()
            worker.join()

    def speak(self, state: VoiceState, text: str, max_tokens: int = MAX_TOKEN_PER_CHUNK, frames_after_eos=None):
        """The utterance prepared: the text checked and the voice put in the cache now, then a call that
        speaks it, each frame to its `on_frame`, and returns its SpeechReport. A text the program
        cannot speak is refused here, before any audio."""
        if not isinstance(state, VoiceState):
            raise PhaseconvError("a voice state comes from get_state_for_audio_prompt")
        s = self.program.settings
        report = SpeechReport(0, 0, s.sample_rate, s.frame_size, self.program.load_ms)
        self.speaker.frames_after_eos, self.speaker.max_tokens = frames_after_eos, max_tokens
        report.voice_ms, report.voice = self.speaker.set_state(state.cache, state.described)
        chunks = self.speaker.chunks(text)

        def run(on_frame, decoder=None) -> SpeechReport:
            self.speaker.speak(chunks, on_frame, report, decoder)
            return report

        return run
