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
    frame_ms: list[float] = field(repr=False, default_factory=list)

    @property
    def first_audio_ms(self) -> float:
        """The first frame's call, from the moment its latent is there."""
        return self.frame_ms[0]

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
        derived = ("first_audio_ms", "median_ms", "p95_ms", "real_time_factor")
        return {**data, **{name: getattr(self, name) for name in derived}}


class StepProgram:
    """A .pte step program, loaded, with its latent width and frame size read from the program."""

    def __init__(self, path: Path):
        from phaseconv.runtimes.executorch import LoadedProgram
        from phaseconv.runtimes.pte import summarize_pte_file

        summary = summarize_pte_file(path)  # a clear error for a file that is not a program
        data_path = path.with_suffix(".ptd")
        if summary.external_constants and not data_path.is_file():
            raise PhaseconvError(
                f"{path} keeps {summary.external_constants} constants in an external data file, and {data_path} "
                "is missing: put it beside the program"
            )
        start = time.perf_counter()
        self.program = LoadedProgram(path, data_path if summary.external_constants else None)
        self.load_ms = (time.perf_counter() - start) * 1e3
        meta = self.program.method_meta()
        if meta.num_inputs() != 1 or meta.num_outputs() != 1:
            raise PhaseconvError(
                f"{path} is not a step program: it takes {meta.num_inputs()} inputs and gives "
                f"{meta.num_outputs()} outputs (a step takes one latent frame, gives one PCM frame)"
            )
        latent, pcm = list(meta.input_tensor_meta(0).sizes()), list(meta.output_tensor_meta(0).sizes())
        if len(latent) != 3 or latent[:2] != [1, 1] or len(pcm) != 3 or pcm[:2] != [1, 1]:
            raise PhaseconvError(f"{path} is not a step program: it maps {latent} to {pcm}, not [1, 1, D] to [1, 1, N]")
        self.latent_dim, self.frame_size = latent[2], pcm[2]

    def check_latents(self, latents: np.ndarray, source: str) -> torch.Tensor:
        """[frames, D] float32 latents as the program takes them, or a clear error."""
        if latents.dtype != np.float32:
            raise PhaseconvError(f"{source} holds {latents.dtype} values; the step takes float32 latents")
        if latents.ndim != 2 or latents.shape[1] != self.latent_dim or latents.shape[0] == 0:
            raise PhaseconvError(
                f"{source} has shape {list(latents.shape)}; the step takes [frames, {self.latent_dim}] latents"
            )
        return torch.from_numpy(np.ascontiguousarray(latents))

    def frames(self, latents: torch.Tensor) -> Iterator[tuple[torch.Tensor, float]]:
        """Each frame's PCM [frame_size] and the milliseconds its call took."""
        for latent in latents:
            start = time.perf_counter()
            (pcm,) = self.program.run((latent.reshape(1, 1, -1),))
            elapsed = (time.perf_counter() - start) * 1e3
            yield pcm.reshape(-1), elapsed


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
    times = []
    for pcm, elapsed in step.frames(latents):
        times.append(elapsed)
        on_frame(pcm)
    return StreamReport(len(times), step.frame_size, SAMPLE_RATE, step.load_ms, times)


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
