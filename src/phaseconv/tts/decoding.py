"""The runner's decoders: the program's decode methods called in the runner's thread, or in a
second process that decodes while the runner generates."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from phaseconv.errors import PhaseconvError
from phaseconv.tts.loaded import SpeechProgram


class InlineDecoder:
    """The program's decoder called after each latent, in this thread: generation waits for it."""

    def __init__(self, program: SpeechProgram):
        self.program = program

    def start(self, deliver: Callable[[torch.Tensor, bool, float], None]) -> None:
        self.deliver = deliver

    def reset(self) -> float:
        """The decoder's state to its start (a new chunk); returns the milliseconds it took."""
        begin = time.perf_counter()
        self.program.reset_decoder()
        return (time.perf_counter() - begin) * 1e3

    def decode(self, latent: torch.Tensor, first_of_chunk: bool) -> None:
        begin = time.perf_counter()
        (pcm,) = self.program.decode(latent)
        self.deliver(pcm, first_of_chunk, (time.perf_counter() - begin) * 1e3)

    def finish(self) -> None:
        pass


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

    def start(self, deliver: Callable[[torch.Tensor, bool, float], None]) -> None:
        """Each frame decoded from here on goes to `deliver`."""
        self.deliver = deliver

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
        self.connection.send(("decode", latent.numpy(), first_of_chunk))
        self.pending += 1
        self._collect(wait=False)

    def finish(self) -> None:
        """Wait until every frame sent is delivered."""
        self._collect(wait=True)

    def close(self) -> None:
        """Stop the process (frames still on their way, after an error, are dropped)."""
        self.connection.send(("stop", None, False))
        with contextlib.suppress(EOFError):  # a process that has died has nothing left to send
            while self.connection.recv() is not None:
                pass
        self.process.join()


def _decode_latents(path: str, threads: int, connection) -> None:
    """The decoder process: reset and decode as told, the latents queued while it decoded the last
    ones at once (as pocket-tts's decoder thread does; the first frame of a chunk never waits), each
    frame's PCM sent back as it is decoded."""
    import collections

    from phaseconv.errors import parked_stderr
    from phaseconv.runtimes.executorch import set_threads

    with parked_stderr():  # the runtime's CPU probing on load
        set_threads(threads)
        program = SpeechProgram(Path(path), methods=lambda name: name.startswith("decode") or name in DECODER_OWN)
    sizes = sorted(program.settings.decode_frames, reverse=True)
    connection.send("ready")
    queued = collections.deque()
    while True:
        if not queued:
            queued.append(connection.recv())
        while connection.poll():
            queued.append(connection.recv())
        command, latent, first_of_chunk = queued.popleft()
        if command == "stop":
            connection.send(None)
            return
        if command == "reset":
            program.reset_decoder()
            continue
        batch = [(latent, first_of_chunk)]
        while queued and queued[0][0] == "decode" and len(batch) < sizes[0]:
            batch.append(queued.popleft()[1:])
        frames = next(size for size in sizes if size <= len(batch))
        for extra in reversed(batch[frames:]):  # back to the queue, for the next call
            queued.appendleft(("decode", *extra))
        begin = time.perf_counter()
        pcm = program.decode_frames(torch.from_numpy(np.concatenate([latent for latent, _ in batch[:frames]], axis=1)))
        each = (time.perf_counter() - begin) * 1e3 / frames
        for index, (frame, (_, first)) in enumerate(zip(pcm, batch[:frames])):
            connection.send((frame.numpy(), first, each, index == 0))
