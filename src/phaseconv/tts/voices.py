"""Voices as pocket-tts takes them: a voice state (a built-in one, or a `.safetensors` file that
`pocket-tts export-voice` writes), or an audio file to clone (read, resampled and ended on a pause as
pocket-tts reads one; its first 30 s, as `pocket-tts export-voice` and `serve` keep).

A voice state is the language model's KV cache after the voice prompt: per attention layer, pocket-tts
keeps `cache` [2, 1, T, H_kv, D] (keys, values) and `offset`, the positions filled. Here a state is one
tensor [layers, 2, V, H_kv, D] of the V positions filled: what the program's `load_voice` writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from phaseconv.errors import PhaseconvError

# pocket-tts keeps the first 30 s of a voice prompt (get_state_for_audio_prompt(truncate=True))
MAX_VOICE_SECONDS = 30.0
# end_on_pause's pause: what a voice prompt may grow by
PAUSE_SECONDS = 0.08


def layer_name(number: int) -> str:
    """The attention layer's name in pocket-tts's model state."""
    return f"transformer.layers.{number}.self_attn"


def state_of(model_state: dict, source: str) -> torch.Tensor:
    """pocket-tts's model state (module -> {cache, offset, ...}) as a tensor [layers, 2, V, H_kv, D]."""
    layers = []
    while layer_name(len(layers)) in model_state:
        entry = model_state[layer_name(len(layers))]
        if "cache" not in entry or "offset" not in entry:
            raise PhaseconvError(f"{source} is not a pocket-tts voice state: {layer_name(len(layers))} has no cache")
        filled = int(entry["offset"].view(-1)[0])
        layers.append(entry["cache"][:, 0, :filled].float())
    if not layers:
        raise PhaseconvError(f"{source} is not a pocket-tts voice state: it has no {layer_name(0)}/cache")
    return torch.stack(layers)


def model_state_of(state: torch.Tensor) -> dict:
    """The inverse of state_of: pocket-tts's model state for a state tensor."""
    return {
        layer_name(number): {
            "cache": layer[:, None].contiguous(),
            "offset": torch.full((1,), state.shape[2], dtype=torch.long),
            "pad": torch.zeros(1, dtype=torch.long),
        }
        for number, layer in enumerate(state)
    }


def read_state(path: Path) -> torch.Tensor:
    """A `.safetensors` voice state, read by pocket-tts's own reader."""
    from pocket_tts.models.model_state import _import_model_state

    if not path.is_file():
        raise PhaseconvError(f"no such voice file: {path}")
    try:
        model_state = _import_model_state(path, torch.device("cpu"))
    except Exception as error:
        raise PhaseconvError(f"{path} is not a pocket-tts voice state: {type(error).__name__}: {error}") from None
    return state_of(model_state, str(path))


def write_state(state: torch.Tensor, path: Path) -> None:
    """A voice state as `pocket-tts export-voice` writes it (its export_model_state), written whole or not at all."""
    import tempfile

    from pocket_tts.models.model_state import export_model_state

    from phaseconv.files import write_atomically

    with tempfile.TemporaryDirectory() as folder:
        export_model_state(model_state_of(state), Path(folder) / "voice.safetensors")
        write_atomically(path, (Path(folder) / "voice.safetensors").read_bytes())


@dataclass
class AudioVoice:
    """A voice prompt read as pocket-tts reads one: mono, its first 30 s, resampled, ended on a pause,
    padded to whole frames. `truncated`: the seconds left out."""

    audio: torch.Tensor  # [1, 1, frames * frame_size]
    frames: int
    truncated: float

    @classmethod
    def read(cls, path: Path, sample_rate: int, frame_size: int) -> AudioVoice:
        from pocket_tts.data.audio import audio_read

        if not path.is_file():
            raise PhaseconvError(f"no such voice file: {path}")
        try:
            audio, rate = audio_read(path)
        except Exception as error:
            raise PhaseconvError(f"{path} is not audio pocket-tts can read: {type(error).__name__}: {error}") from None
        if audio.numel() == 0:
            raise PhaseconvError(f"{path} holds no audio")
        return cls.of(audio, rate, sample_rate, frame_size)

    @classmethod
    def of(cls, audio: torch.Tensor, rate: int, sample_rate: int, frame_size: int) -> AudioVoice:
        """Audio [channels, samples] at `rate` as a voice prompt at `sample_rate`."""
        from pocket_tts.data.audio_utils import convert_audio, end_on_pause
        from pocket_tts.modules.conv import pad_for_conv1d

        keep = int(MAX_VOICE_SECONDS * rate)
        truncated = max(0, audio.shape[-1] - keep) / rate
        audio = end_on_pause(convert_audio(audio[..., :keep], rate, sample_rate, 1), sample_rate)
        audio = pad_for_conv1d(audio[None], frame_size, frame_size)
        return cls(audio, audio.shape[-1] // frame_size, truncated)

    @property
    def described(self) -> str:
        return "audio" + (f", its first {MAX_VOICE_SECONDS:g} s" if self.truncated else "")


def longest_audio_voice(sample_rate: int, frame_size: int, voice_start: bool) -> int:
    """The positions the longest audio voice takes: 30 s and the pause, in frames, and the start."""
    samples = round((MAX_VOICE_SECONDS + PAUSE_SECONDS) * sample_rate)
    return -(-samples // frame_size) + int(voice_start)
