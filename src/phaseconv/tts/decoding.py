"""The runner's decoders: the program's decode methods called in the runner's thread, or in a
second process that decodes while the runner generates.

Both decode a chunk's latents in calls of several frames (decode_N reads the decoder's weights once
for them) as soon as the audio given out is far enough ahead of its playback that waiting for them
cannot make it late (`decode_size`); until then, each latent as it comes: the first frame of an
utterance never waits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import torch

from phaseconv.errors import PhaseconvError
from phaseconv.tts.loaded import SpeechProgram


def decode_size(queued: int, sizes: list[int], ahead_ms: float, frame_ms: float, complete: bool) -> int:
    """How many of the `queued` latents the next decode call takes (0: wait for more). The most of
    `sizes` once that many are queued; until then, while the audio given out plays for at least that
    many frames more (`ahead_ms`) and the chunk has more to come (not `complete`), 0; else the most
    of `sizes` the queue holds."""
    largest = max(sizes)
    if queued < largest and not complete and ahead_ms >= largest * frame_ms:
        return 0
    return max((size for size in sizes if size <= queued), default=0)


class AudioClock:
    """How far the audio given out runs ahead of its playback, were playback to start with its first frame."""

    def __init__(self, frame_ms: float):
        self.frame_ms, self.first, self.frames = frame_ms, None, 0

    def delivered(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self.frames += 1

    def ahead_ms(self) -> float:
        if self.first is None:
            return 0.0
        return self.frames * self.frame_ms - (time.perf_counter() - self.first) * 1e3


def frame_ms(program: SpeechProgram) -> float:
    return 1e3 * program.settings.frame_size / program.settings.sample_rate


def decode_batch(program: SpeechProgram, latents: list[torch.Tensor]) -> tuple[torch.Tensor, float]:
    """Latents [1, 1, latent_dim] decoded in one call: pcm [N, frame_size], and milliseconds per frame."""
    begin = time.perf_counter()
    pcm = program.decode_frames(torch.cat(latents, dim=1))
    return pcm, (time.perf_counter() - begin) * 1e3 / len(latents)


class InlineDecoder:
    """The program's decoder in this thread: generation waits for each call (decode_size says when)."""

    def __init__(self, program: SpeechProgram):
        self.program = program
        self.sizes = sorted(program.settings.decode_frames, reverse=True)

    def start(self, deliver: Callable[[torch.Tensor, bool, float, bool], None]) -> None:
        self.deliver, self.held, self.clock = deliver, [], AudioClock(frame_ms(self.program))

    def reset(self) -> float:
        """The decoder's state to its start (a new chunk); returns the milliseconds it took."""
        self._decode_held(complete=True)
        begin = time.perf_counter()
        self.program.reset_decoder()
        return (time.perf_counter() - begin) * 1e3

    def decode(self, latent: torch.Tensor, first_of_chunk: bool) -> None:
        self.held.append((latent, first_of_chunk))
        self._decode_held(complete=False)

    def _decode_held(self, complete: bool) -> None:
        while frames := decode_size(len(self.held), self.sizes, self.clock.ahead_ms(), self.clock.frame_ms, complete):
            batch, self.held = self.held[:frames], self.held[frames:]
            pcm, each = decode_batch(self.program, [latent for latent, _ in batch])
            for index, (frame, (_, first)) in enumerate(zip(pcm, batch)):
                self.clock.delivered()
                self.deliver(frame, first, each, index == 0)

    def finish(self) -> None:
        self._decode_held(complete=True)


# The methods the decoder process loads, beside decode and decode_N.
DECODER_OWN = ("reset_decoder", "settings")


class DecoderProcess:
    """The program's decoder in a second process (the same file, loaded again), fed each latent over a
    pipe while this process generates the next: the language model and the decoder run at once, on two
    cores, as pocket-tts's own streaming runs them on two threads (ExecuTorch's Python bindings hold the
    interpreter lock while a method runs, so a second thread here would not overlap with the first).
    The decoded frames come back over the same pipe and are delivered here between the frames this
    process generates (the rest when it finishes), in this thread: no third thread wakes for each."""

    def __init__(self, path: Path, threads: int = 1):
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # a fresh runtime: its thread pool sized before a load
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_decode_latents, args=(str(path), threads, child), daemon=True)
        self.process.start()
        child.close()
        if self.connection.recv() != "ready":
            raise PhaseconvError(f"the decoder process could not load {path}")
        self.pending = 0

    def start(self, deliver: Callable[[torch.Tensor, bool, float, bool], None]) -> None:
        """Each frame decoded from here on goes to `deliver` (an utterance begins: its audio's clock too)."""
        self.deliver, self.first_latent = deliver, True
        self.connection.send(("start", None, False))

    def _collect(self, wait: bool) -> None:
        """Deliver the frames decoded so far; with `wait`, every frame sent."""
        while self.pending and (wait or self.connection.poll()):
            pcm, first_of_chunk, decode_ms, first_of_call = self.connection.recv()
            self.pending -= 1
            self.deliver(torch.from_numpy(pcm), first_of_chunk, decode_ms, first_of_call)

    def reset(self) -> float:
        self.connection.send(("reset", None, False))
        return 0.0  # done by the other process, between two frames it decodes

    def decode(self, latent: torch.Tensor, first_of_chunk: bool) -> None:
        """The utterance's first latent returns once its audio is out: on one core the next frame would
        share it with the decoder and delay the first audio."""
        self.connection.send(("decode", latent.numpy(), first_of_chunk))
        self.pending += 1
        self._collect(wait=self.first_latent)
        self.first_latent = False

    def finish(self) -> None:
        """Wait until every frame sent is delivered."""
        self.connection.send(("end", None, False))  # the last chunk has no more latents to wait for
        self._collect(wait=True)

    def close(self) -> None:
        """Stop the process (frames still on their way, after an error, are dropped)."""
        self.connection.send(("stop", None, False))
        with contextlib.suppress(EOFError):  # a process that has died has nothing left to send
            while self.connection.recv() is not None:
                pass
        self.process.join()


def _decode_latents(path: str, threads: int, connection) -> None:
    """The decoder process: reset and decode as told, the latents in calls decode_size chooses (a
    reset or an end closes a chunk), each frame's PCM sent back as it is decoded."""
    import collections

    from phaseconv.errors import parked_stderr
    from phaseconv.runtimes.executorch import set_threads

    with parked_stderr():  # the runtime's CPU probing on load
        set_threads(threads)
        program = SpeechProgram(Path(path), methods=lambda name: name.startswith("decode") or name in DECODER_OWN)
    sizes = sorted(program.settings.decode_frames, reverse=True)
    clock = AudioClock(frame_ms(program))
    connection.send("ready")
    queued = collections.deque()
    while True:
        latents = next((i for i, (command, *_) in enumerate(queued) if command != "decode"), len(queued))
        if queued and not latents:
            command = queued.popleft()[0]
            if command == "stop":
                connection.send(None)
                return
            if command == "reset":
                program.reset_decoder()
            if command == "start":
                clock = AudioClock(clock.frame_ms)
            continue
        frames = decode_size(latents, sizes, clock.ahead_ms(), clock.frame_ms, complete=latents < len(queued))
        if frames:
            batch = [queued.popleft()[1:] for _ in range(frames)]
            pcm, each = decode_batch(program, [torch.from_numpy(latent) for latent, _ in batch])
            for index, (frame, (_, first)) in enumerate(zip(pcm, batch)):
                clock.delivered()
                connection.send((frame.numpy(), first, each, index == 0))
            continue
        # nothing to decode yet: wait for a message, at most until waiting longer could make the audio late
        wait = max(0.0, clock.ahead_ms() - sizes[0] * clock.frame_ms) / 1e3 if latents else None
        while connection.poll(wait):
            queued.append(connection.recv())
            wait = 0
