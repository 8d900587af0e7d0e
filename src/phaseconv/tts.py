"""Speak text through a text-to-speech program (`phaseconv lower pocket-tts-tts:CONFIG`), streamed.

The runner does what pocket-tts's `TTSModel.generate_audio_stream` does, with every model call
made by the program's methods (models/pocket_tts/program.py) and pocket-tts's own code for the
rest: text normalization and chunking (`split_into_best_sentences`, `prepare_text_prompt`), the
tokenizer, reading and resampling a voice prompt (`audio_read`, `convert_audio`, `end_on_pause`),
the noise (normal, or truncated normal with `noise_clamp`, std sqrt(temperature)) and the
end-of-speech rule (the EOS logit above the threshold, not before frame 6, then
`frames_after_eos` more frames). Noise is drawn in pocket-tts's order from a generator seeded
with `seed`, so the same seed gives the same audio, and pocket-tts's with `torch.manual_seed(seed)`.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from phaseconv.errors import PhaseconvError

METHODS = (
    "embed_text",
    "voice_start",
    "encode_voice",
    "reset_encoder",
    "prompt",
    "generate_0",  # and generate_1, ...: one per block of the cache (generate below)
    "clear_cache",
    "decode",
    "reset_decoder",
    "settings",
)


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
    first_audio_ms: float  # from the text (and a voice prompt already encoded) to the first PCM frame
    voice_ms: float  # encoding and prompting the voice, once per utterance
    reset_ms: float  # the decoder's reset before a chunk (median)
    eos_frames: list[int | None] = field(default_factory=list)  # per chunk: the frame EOS was seen at
    capped_chunks: int = 0  # chunks stopped by the program's capacity, not by EOS or pocket-tts's maximum
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


class SpeechProgram:
    """A loaded text-to-speech program: its methods (`methods`: those to load, default all) and the
    settings it carries."""

    def __init__(self, path: Path, methods=None):
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
        data = data_path if summary.external_constants else None
        self.program = LoadedProgram(path, data, methods=methods)
        self.load_ms = (time.perf_counter() - start) * 1e3
        missing = [name for name in METHODS if name not in self.program.all_methods]
        if missing:
            raise PhaseconvError(
                f"{path} is not a text-to-speech program: it has no {', '.join(missing)} "
                "(make one with `phaseconv lower pocket-tts-tts:CONFIG`)"
            )
        self.settings = json.loads(self.program.run((), "settings")[0])

    def generate(self, latent: torch.Tensor, start: torch.Tensor, noise: torch.Tensor, position: int) -> list:
        """One frame at `position`, by the method of the cache block it falls in."""
        method = f"generate_{position // self.settings['cache_block']}"
        return self.program.run((latent, start, noise, torch.tensor([position])), method)

    def __getattr__(self, method: str) -> Callable:
        if method not in METHODS:
            raise AttributeError(method)
        return lambda *inputs: self.program.run(inputs, method)


class Voice:
    """A voice prompt read as pocket-tts reads one: mono, resampled, ended on a pause, whole frames."""

    def __init__(self, path: Path, sample_rate: int, frame_size: int):
        from pocket_tts.data.audio import audio_read
        from pocket_tts.data.audio_utils import convert_audio, end_on_pause
        from pocket_tts.modules.conv import pad_for_conv1d

        if not path.is_file():
            raise PhaseconvError(f"no such voice file: {path}")
        try:
            audio, rate = audio_read(path)
        except Exception as error:
            raise PhaseconvError(f"{path} is not audio pocket-tts can read: {type(error).__name__}: {error}") from None
        if audio.numel() == 0:
            raise PhaseconvError(f"{path} holds no audio")
        audio = end_on_pause(convert_audio(audio, rate, sample_rate, 1), sample_rate)
        self.audio = pad_for_conv1d(audio[None], frame_size, frame_size)
        self.frames = self.audio.shape[-1] // frame_size


class Speaker:
    """Text to PCM through a SpeechProgram, in pocket-tts's order of calls (see the module docstring)."""

    def __init__(self, program: SpeechProgram, tokenizer_path: Path, temperature: float | None = None, seed: int = 0):
        from pocket_tts.models.tts_model import TTSModel

        from phaseconv.models.pocket_tts.program import load_tokenizer

        self.program, self.settings = program, program.settings
        self.tokenizer = load_tokenizer(tokenizer_path, self.settings["n_bins"])
        self.temperature = self.settings["temperature"] if temperature is None else temperature
        if self.temperature < 0:
            raise PhaseconvError(f"the temperature must be 0 or more, got {self.temperature}")
        self.generator = torch.Generator().manual_seed(seed)
        self.min_frames_before_eos = TTSModel._MIN_FRAMES_BEFORE_EOS
        self.voice_positions = 0  # the positions the voice prompt holds

    def noise(self) -> torch.Tensor:
        """One draw of the flow's starting point, as FlowLMModel.forward draws it."""
        from phaseconv.models.pocket_tts.language_model import draw_noise

        return draw_noise(self.generator, self.settings["latent_dim"], self.temperature, self.settings["noise_clamp"])

    def prompt(self, embeddings: torch.Tensor, first: int) -> None:
        """Conditioning into the cache at first, first + 1, ...; a prompt call draws noise in pocket-tts."""
        count = embeddings.shape[1]
        if first + count > self.settings["capacity"]:
            raise PhaseconvError(
                f"the prompt needs positions up to {first + count}; the program holds {self.settings['capacity']} "
                "(lower it with a larger --capacity, or use a shorter voice prompt)"
            )
        step = self.settings.get("prompt_tokens_per_call", self.settings["capacity"])  # older programs: one call
        for start in range(0, count, step):
            part = embeddings[:, start : start + step]
            self.program.prompt(part, torch.arange(first + start, first + start + part.shape[1]))
        self.noise()

    def set_voice(self, voice: Voice | None) -> float:
        """Prompt the voice (none: the model's unconditioned start); returns the milliseconds it took."""
        start = time.perf_counter()
        self.program.clear_cache()  # the cache holds numbers from here on (see program.py)
        self.voice_positions = 0
        if voice is not None:
            self.program.reset_encoder()
            step = self.settings["voice_frames_per_call"] * self.settings["frame_size"]
            audio = torch.nn.functional.pad(voice.audio, (0, -voice.audio.shape[-1] % step))  # causal: zeros after
            calls = range(0, audio.shape[-1], step)
            encoded = torch.cat([self.program.encode_voice(audio[..., i : i + step])[0] for i in calls], dim=1)
            prefix = [self.program.voice_start()[0]] if self.settings["voice_start"] else []
            conditioning = torch.cat([*prefix, encoded[:, : voice.frames]], dim=1)
            self.prompt(conditioning, 0)
            self.voice_positions = conditioning.shape[1]
        return (time.perf_counter() - start) * 1e3

    def chunks(self, text: str) -> list[tuple[str, int]]:
        """The text as pocket-tts splits and prepares it: (prepared chunk, frames to generate after EOS)."""
        from pocket_tts.default_parameters import MAX_TOKEN_PER_CHUNK

        text_chunking, s = _pocket_tts_text(), self.settings
        options = (
            s["pad_with_spaces_for_short_inputs"],
            s["remove_semicolons"],
            s["append_terminal_punctuation"],
            s["capitalize_first_letter"],
            s["replace_characters"],
        )
        if not text.strip():
            raise PhaseconvError("the text is empty")
        try:
            pieces = text_chunking.split_into_best_sentences(self.tokenizer, text, MAX_TOKEN_PER_CHUNK, *options)
        except ValueError as error:  # pocket-tts: "Text prompt cannot be empty" (all characters removed)
            raise PhaseconvError(f"nothing to say in {text!r}: {error}") from None
        prepared = []
        for piece in pieces:
            chunk, guess = text_chunking.prepare_text_prompt(piece, *options)
            after = s["frames_after_eos"] if s["frames_after_eos"] is not None else guess + 2
            prepared.append((chunk, after))
        return prepared

    def speak(self, text: str, on_frame: Callable[[torch.Tensor], None], report: SpeechReport, decoder=None) -> None:
        """Generate and decode every chunk of `text`, handing each frame's samples to `on_frame`; the
        decoder is the program's own (frame after frame) unless another is given (DecoderProcess)."""
        settings = self.settings
        started = time.perf_counter()
        decoder = decoder or InlineDecoder(self.program)
        fade = torch.linspace(0, 1, settings["sample_rate"] // 200)  # the decoder worker's 5 ms fade-in

        def deliver(pcm: torch.Tensor, first_of_chunk: bool, decode_ms: float) -> None:
            pcm = pcm.reshape(-1)
            if first_of_chunk:
                pcm[: fade.numel()] *= fade
            if report.frames == 0:
                report.first_audio_ms = (time.perf_counter() - started) * 1e3
            report.frames += 1
            report.decode_ms.append(decode_ms)
            on_frame(pcm)

        decoder.start(deliver)
        for chunk, frames_after_eos in self.chunks(text):
            tokens = self.tokenizer(chunk)
            if tokens.shape[1] > settings["max_text_tokens"]:
                raise PhaseconvError(
                    f"a sentence of {tokens.shape[1]} tokens; the program reads at most {settings['max_text_tokens']} "
                    "at once: split it with punctuation"
                )
            start = time.perf_counter()
            (embeddings,) = self.program.embed_text(tokens)
            self.prompt(embeddings, self.voice_positions)
            report.prompt_ms.append((time.perf_counter() - start) * 1e3)
            report.reset_ms = decoder.reset()
            first = self.voice_positions + tokens.shape[1]
            self._generate(first, frames_after_eos, tokens.shape[1], decoder, report)
            report.chunks += 1
        decoder.finish()
        report.total_ms = (time.perf_counter() - started) * 1e3

    def _generate(self, first, frames_after_eos, token_count, decoder, report) -> None:
        """pocket-tts's `_autoregressive_generation`: each latent handed to the decoder as it comes."""
        settings = self.settings
        limit = math.ceil((token_count / 3.0 + 2.0) * settings["frame_rate"])  # TTSModel._estimate_max_gen_len
        room = settings["capacity"] - first
        latent, start_flag = torch.zeros(1, 1, settings["latent_dim"]), torch.ones(1)
        eos_frame = None
        for step in range(min(limit, room)):
            begin = time.perf_counter()
            latent, eos_logit = self.program.generate(latent, start_flag, self.noise(), first + step)
            report.lm_ms.append((time.perf_counter() - begin) * 1e3)
            if (
                float(eos_logit) > settings["eos_threshold"]
                and eos_frame is None
                and step >= self.min_frames_before_eos
            ):
                eos_frame = step
            if eos_frame is not None and step >= eos_frame + frames_after_eos:
                break
            decoder.decode(latent, first_of_chunk=step == 0)
            start_flag = torch.zeros(1)
        else:
            if room < limit and eos_frame is None:
                report.capped_chunks += 1
        report.eos_frames.append(eos_frame)


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


class DecoderProcess:
    """The program's decoder in a second process (the same file, loaded again), fed each latent over a
    pipe while this process generates the next: the language model and the decoder run at once, on two
    cores, as pocket-tts's own streaming runs them on two threads. (ExecuTorch's Python bindings hold the
    interpreter lock while a method runs, so a second thread here would not overlap with the first.)
    The decoded frames come back over the same pipe and are delivered here between the frames this
    process generates (the rest when it finishes), in this thread: with a receiving thread, woken for
    every frame and waiting for the interpreter lock, english_18m spent 0.27 ms a frame outside its
    language model's calls, 0.22 so."""

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
            pcm, first_of_chunk, decode_ms = self.connection.recv()
            self.pending -= 1
            self.deliver(torch.from_numpy(pcm), first_of_chunk, decode_ms)

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
    """The decoder process: reset and decode as told, each frame's PCM sent back as it is decoded."""
    from phaseconv.errors import parked_stderr
    from phaseconv.runtimes.executorch import set_threads

    with parked_stderr():  # the runtime's CPU probing on load
        set_threads(threads)
        program = SpeechProgram(Path(path), methods=("decode", "reset_decoder", "settings"))
    program.reset_decoder()
    connection.send("ready")
    while True:
        command, latent, first_of_chunk = connection.recv()
        if command == "stop":
            connection.send(None)
            return
        if command == "reset":
            program.reset_decoder()
            continue
        begin = time.perf_counter()
        (pcm,) = program.decode(torch.from_numpy(latent))
        connection.send((pcm.reshape(-1).numpy(), first_of_chunk, (time.perf_counter() - begin) * 1e3))
