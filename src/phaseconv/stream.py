"""Run a streaming step program frame by frame: latent [1, 1, D] -> pcm [1, 1, N] per call.

The program keeps its state (convolution tails, held-back partial outputs, a KV cache) in its own
buffers, so a runtime calls `forward` once per frame; loading it again starts a new utterance.
"""

from __future__ import annotations

import statistics
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from phaseconv.errors import PhaseconvError

SAMPLE_RATE = 24000


@dataclass
class StreamReport:
    """What a listener notices: how soon the first audio comes, and how long each frame takes."""

    frames: int
    samples_per_frame: int
    sample_rate: int
    load_ms: float
    frame_ms: list[float] = field(repr=False, default_factory=list)  # each frame's share of its call
    first_audio_ms: float = 0.0  # the first call, from the moment its latents are there
    frames_per_call: int = 1

    @property
    def median_ms(self) -> float:
        return statistics.median(self.frame_ms)

    @property
    def p95_ms(self) -> float:
        return float(np.percentile(self.frame_ms, 95))

    @property
    def real_time_factor(self) -> float:
        """Decoding time over the audio's duration (below 1: faster than real time)."""
        return sum(self.frame_ms) / 1e3 / (self.frames * self.samples_per_frame / self.sample_rate)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("frame_ms")
        derived = ("median_ms", "p95_ms", "real_time_factor")
        return {**data, **{name: getattr(self, name) for name in derived}}


class StepProgram:
    """A .pte step program, loaded, with its latent width, frame size and frames a call read from the
    program (latents [1, N, D] -> pcm [1, 1, N * frame_size])."""

    def __init__(self, path: Path):
        from phaseconv.runtimes.executorch import LoadedProgram
        from phaseconv.runtimes.pte import data_file

        data = data_file(path)
        start = time.perf_counter()
        self.program = LoadedProgram(path, data)
        self.load_ms = (time.perf_counter() - start) * 1e3
        meta = self.program.method_meta()
        if meta.num_inputs() != 1 or meta.num_outputs() != 1:
            raise PhaseconvError(
                f"{path} is not a step program: it takes {meta.num_inputs()} inputs and gives "
                f"{meta.num_outputs()} outputs (a step takes one latent frame, gives one PCM frame)"
            )
        latent, pcm = list(meta.input_tensor_meta(0).sizes()), list(meta.output_tensor_meta(0).sizes())
        if len(latent) != 3 or latent[0] != 1 or len(pcm) != 3 or pcm[:2] != [1, 1] or pcm[2] % latent[1]:
            raise PhaseconvError(
                f"{path} is not a step program: it maps {latent} to {pcm}, not [1, frames, D] to [1, 1, frames * N]"
            )
        self.frames_per_call, self.latent_dim, self.frame_size = latent[1], latent[2], pcm[2] // latent[1]

    def check_latents(self, latents: np.ndarray, source: str) -> torch.Tensor:
        """[frames, D] float32 latents as the program takes them, or a clear error."""
        if latents.dtype != np.float32:
            raise PhaseconvError(f"{source} holds {latents.dtype} values; the step takes float32 latents")
        if latents.ndim != 2 or latents.shape[1] != self.latent_dim or latents.shape[0] == 0:
            raise PhaseconvError(
                f"{source} has shape {list(latents.shape)}; the step takes [frames, {self.latent_dim}] latents"
            )
        if latents.shape[0] % self.frames_per_call:
            raise PhaseconvError(
                f"{source} holds {latents.shape[0]} frames; the step decodes {self.frames_per_call} a call: "
                "give a multiple of that"
            )
        return torch.from_numpy(np.ascontiguousarray(latents))

    def calls(self, latents: torch.Tensor) -> Iterator[tuple[torch.Tensor, float]]:
        """Each call's PCM [frames_per_call, frame_size] and the milliseconds it took."""
        count = self.frames_per_call
        for first in range(0, latents.shape[0], count):
            start = time.perf_counter()
            (pcm,) = self.program.run((latents[first : first + count].reshape(1, count, -1),))
            yield pcm.reshape(count, -1), (time.perf_counter() - start) * 1e3


def load_latents(path: Path) -> np.ndarray:
    if not path.is_file():
        raise PhaseconvError(f"no such latents file: {path}")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as error:
        raise PhaseconvError(f"{path} is not a .npy array: {type(error).__name__}: {error}") from None


def random_latents(frames: int, dim: int, seed: int = 0) -> np.ndarray:
    return torch.randn(frames, dim, generator=torch.Generator().manual_seed(seed)).numpy()


def to_pcm16(samples: torch.Tensor) -> bytes:
    """float samples in [-1, 1] -> 16-bit little-endian PCM (clipped)."""
    return (samples.clamp(-1, 1) * 32767).round().to(torch.int16).numpy().astype("<i2").tobytes()


def stream(step: StepProgram, latents: torch.Tensor, on_frame: Callable[[torch.Tensor], None]) -> StreamReport:
    """Decode every latent frame, handing each frame's samples to `on_frame` as soon as it is there."""
    report = StreamReport(0, step.frame_size, SAMPLE_RATE, step.load_ms, frames_per_call=step.frames_per_call)
    for pcm, elapsed in step.calls(latents):
        if not report.frame_ms:
            report.first_audio_ms = elapsed
        for frame in pcm:
            report.frames += 1
            report.frame_ms.append(elapsed / len(pcm))
            on_frame(frame)
    return report


def write_wav(path: Path, pcm16: bytes, sample_rate: int = SAMPLE_RATE) -> None:
    """A mono 16-bit WAV, written atomically."""
    import io

    from phaseconv.files import write_atomically

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm16)
    write_atomically(path, buffer.getvalue())
