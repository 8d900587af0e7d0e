"""The commands that speak: tts (a text-to-speech program), stream (a decoder step program), and
`lower pocket-tts-tts:CONFIG`, which builds the first."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from phaseconv.cli.app import app, known_failures, note, print_json, quiet
from phaseconv.cli.options import JsonFile, Threads, WavFile, audio_destination
from phaseconv.cli.output import line, show_decisions, show_stages, show_summaries, show_written
from phaseconv.errors import PhaseconvError, parked_stderr
from phaseconv.files import require_folder, write_atomically

PcmOut = Annotated[bool, typer.Option("--pcm", help="write 16-bit mono PCM to stdout as each frame is decoded")]
Voice = Annotated[
    str | None,
    typer.Option(
        "--voice",
        help="a built-in voice of the program (--list-voices), a .safetensors voice state (pocket-tts "
        "export-voice), or an audio file to clone (its first 30 s), a path or an http(s):// or hf:// URL; "
        "default: the program's default voice",
    ),
]
Tokenizer = Annotated[
    Path | None, typer.Option("--tokenizer", help="a tokenizer (.model or .json) instead of the program's own")
]
Temperature = Annotated[
    float | None, typer.Option("--temperature", help="noise scale; 0: deterministic (default: the config's)")
]
Seed = Annotated[int, typer.Option("--seed", help="the noise's seed: the same seed, the same audio")]
EosThreshold = Annotated[
    float | None,
    typer.Option("--eos-threshold", help="the end-of-speech logit past which a chunk ends (default: the config's)"),
]
FramesAfterEos = Annotated[
    int | None,
    typer.Option("--frames-after-eos", min=0, help="frames spoken after the end of speech (default: the config's)"),
]
MaxTokens = Annotated[
    int, typer.Option("--max-tokens", min=1, help="a chunk's tokens at most, as pocket-tts's generate takes it")
]
Pipeline = Annotated[
    bool, typer.Option("--pipeline", help="decode in a second process while the language model generates")
]
ListVoices = Annotated[bool, typer.Option("--list-voices", help="name the program's built-in voices")]
ExportVoice = Annotated[
    Path | None, typer.Option("--export-voice", help="write --voice's state (as pocket-tts export-voice)")
]


def audio_sink(pcm: bool):
    """(deliver, chunks): each frame's samples as 16-bit PCM to stdout (`pcm`) or into `chunks`."""
    from phaseconv.stream import to_pcm16

    chunks: list[bytes] = []

    def deliver(samples) -> None:
        data = to_pcm16(samples)
        if pcm:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            chunks.append(data)

    return deliver, chunks


def lower_tts(config, output: Path, sources, options, as_json: bool, verbose: bool, profile_memory: bool) -> None:
    """`phaseconv lower pocket-tts-tts:CONFIG`: the whole text-to-speech model as one program."""
    from phaseconv.lowering.methods import default_workers
    from phaseconv.tts.build import lower_tts
    from phaseconv.tts.footprint import Footprint, memory_check
    from phaseconv.tts.source import DEFAULT_TTS_CONFIG, load_model

    capacity, quantize, quantize_decoder, no_rewrite, external_constants, target, workers = options
    _require_tts_quantization(quantize, quantize_decoder)
    config = config or DEFAULT_TTS_CONFIG
    weights, random_weights, tokenizer, voices = sources
    model = load_model(config, weights, tokenizer, random_weights, voices)
    workers = workers or default_workers()
    footprint = Footprint.of(model.tts)
    note(memory_check(config, footprint, workers))
    err = Console(stderr=True)
    with known_failures(config, False), Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"lowering {config}'s methods", total=None)

        def progress(method: str, took: float) -> None:
            bar.update(task, description=f"lowering {config}'s methods: {method} took {took:.0f} s")

        lowering = (quantize, quantize_decoder, not no_rewrite, external_constants, target, progress, workers)
        lowered, settings = lower_tts(model, capacity, *lowering, scratch=output.parent)
    files = lowered.save(output)
    if as_json:
        report = _tts_lowering_report(files, settings, lowered) | {"memory": footprint.to_dict(workers)}
        return print_json(report | {"lowering_s": lowered.seconds, "stages": [s.to_dict() for s in lowered.stages]})
    _show_tts_lowering(config, files, settings, lowered, verbose, profile_memory)


def _require_tts_quantization(quantize: str | None, quantize_decoder: str | None) -> None:
    from phaseconv.models.pocket_tts.language_model import LINEAR_QUANTIZATION
    from phaseconv.tts.build import DECODER_QUANTIZATION

    if quantize is not None and quantize not in LINEAR_QUANTIZATION:
        raise PhaseconvError(
            f"--quantize takes {' or '.join(LINEAR_QUANTIZATION)} for pocket-tts-tts:CONFIG (its LM's linears), "
            f"got {quantize!r}"
        )
    if quantize_decoder is not None and quantize_decoder not in DECODER_QUANTIZATION:
        raise PhaseconvError(f"--quantize-decoder takes {' or '.join(DECODER_QUANTIZATION)}, got {quantize_decoder!r}")


def _methods_of(path: Path) -> dict:
    from phaseconv.runtimes.pte import mapped, summarize_methods

    with mapped(path) as data:
        return summarize_methods(data)


def _tts_lowering_report(files, settings, lowered) -> dict:
    report = {"files": [str(f) for f in files], "settings": json.loads(settings.to_json())}
    report |= {"decisions": [d.to_dict() for d in lowered.decisions]}
    return report | {"methods": {name: summary.to_dict() for name, summary in _methods_of(files[0]).items()}}


def _show_tts_lowering(config, files, settings, lowered, verbose: bool, profile_memory: bool) -> None:
    if lowered.decisions:
        show_decisions(lowered.decisions, verbose)
    show_summaries(_methods_of(files[0]))
    if profile_memory:
        show_stages(lowered.stages)
    carried = ", ".join(settings.voices) or "none (audio voices and .safetensors states only)"
    default = f" (default {settings.default_voice})" if settings.default_voice else ""
    cloning = "yes" if settings.voice_cloning else "no (weights without voice cloning)"
    line(
        f"{config}: weights {settings.weights}; tokenizer {settings.tokenizer or 'none (give one to tts)'}; "
        f"built-in voices {carried}{default}; audio voices {cloning}; cache {settings.capacity} positions"
    )
    show_written(files)


@app.command()
def tts(
    program: Annotated[
        Path, typer.Argument(help="a text-to-speech program from `phaseconv lower pocket-tts-tts:CONFIG`")
    ],
    text: Annotated[str | None, typer.Argument(help="what to say; - reads it from standard input")] = None,
    voice: Voice = None,
    tokenizer: Tokenizer = None,
    temperature: Temperature = None,
    seed: Seed = 0,
    eos_threshold: EosThreshold = None,
    frames_after_eos: FramesAfterEos = None,
    max_tokens: MaxTokens = 50,
    threads: Threads = 1,
    pipeline: Pipeline = False,
    pcm: PcmOut = False,
    output: WavFile = None,
    json_path: JsonFile = None,
    list_voices: ListVoices = False,
    export_voice: ExportVoice = None,
) -> None:
    """Speak TEXT through a text-to-speech program, streamed frame by frame; the summary goes to stderr.

    phaseconv tts tts.pte "Hello there." --voice alba --pcm | aplay -f S16_LE -r 24000 -c 1
    """
    from phaseconv.runtimes.executorch import set_threads
    from phaseconv.tts.loaded import SpeechProgram

    speaking = not (list_voices or export_voice is not None)
    if speaking and text == "-":
        text = sys.stdin.read()
    if speaking and text is None:
        raise PhaseconvError("say what to speak: phaseconv tts PROGRAM TEXT (or --list-voices, --export-voice)")
    if speaking:
        audio_destination(pcm, output)
    for path in (output, json_path, export_voice):
        if path is not None:
            require_folder(path)
    if speaking and not text.strip():
        raise PhaseconvError("the text is empty")
    if tokenizer is not None and not tokenizer.is_file():
        raise PhaseconvError(f"no such tokenizer file: {tokenizer}")
    with parked_stderr(quiet()):  # the runtime's CPU probing on load
        set_threads(threads)
        speech = SpeechProgram(program, tokenizer=tokenizer)
    if list_voices:
        return show_voices(speech)
    if export_voice is not None:
        return export(speech, voice, export_voice)
    sampling = (temperature, seed, eos_threshold, frames_after_eos, max_tokens)
    summary = speak(speech, text, voice, sampling, pipeline, pcm, output, threads)
    if json_path is not None:
        write_atomically(json_path, json.dumps(summary, indent=2).encode())


def show_voices(speech) -> None:
    settings = speech.settings
    for name in speech.voices:
        line(f"{name}: {settings.voices[name]} positions{' (default)' if name == settings.default_voice else ''}")
    if not speech.voices:
        line("no built-in voices: --voice takes a .safetensors voice state or an audio file")


def voice_state(model, voice: str | None):
    """The voice `--voice` names (none: the program's default voice, or none at all), as a state."""
    chosen = voice or model.program.settings.default_voice
    return model.empty_state() if chosen is None else model.get_state_for_audio_prompt(chosen)


def export(speech, voice: str | None, path: Path) -> None:
    from phaseconv.tts import TTSModel, export_model_state

    if voice is None:
        raise PhaseconvError("--export-voice needs --voice: the voice to write")
    state = TTSModel(speech).get_state_for_audio_prompt(voice)
    export_model_state(state, path)
    note(f"wrote {path} ({state.positions} positions)")


def speak(speech, text, voice, sampling, pipeline, pcm, output, threads) -> dict:
    """TEXT spoken to stdout (PCM) or a WAV file; returns the summary, said on stderr. `sampling`:
    (temperature, seed, end-of-speech threshold, frames after it, a chunk's tokens at most)."""
    import time

    from phaseconv.stream import write_wav
    from phaseconv.tts import TTSModel
    from phaseconv.tts.decoding import DecoderProcess

    temperature, seed, eos_threshold, frames_after_eos, max_tokens = sampling
    settings, model = speech.settings, TTSModel(speech, temperature, eos_threshold, seed)
    unknown = model.speaker.unknown_characters(text)
    if unknown:
        note(f"the tokenizer reads {' '.join(unknown)} as its unknown piece (pocket-tts speaks it so)")
    start = time.perf_counter()
    state = voice_state(model, voice)
    encoded_ms = (time.perf_counter() - start) * 1e3
    run = model.speak(state, text, max_tokens, frames_after_eos)
    deliver, chunks = audio_sink(pcm)
    decoder = None
    if pipeline:
        with parked_stderr(quiet()):
            decoder = DecoderProcess(speech.path, threads)
    report = run(deliver, decoder)
    report.voice_ms += encoded_ms
    if decoder is not None:
        decoder.close()
    if output is not None:
        write_wav(output, b"".join(chunks), report.sample_rate)
    precision = {"lm": settings.quantize or "fp32", "decoder": settings.quantize_decoder or "fp32"}
    summary = report.to_dict() | {"threads": threads, "pipeline": pipeline, "precision": precision}
    note(
        f"{report.frames} frames ({report.audio_seconds:.2f} s of audio, {report.chunks} chunk(s)) in voice "
        f"{report.voice} at {threads} thread(s), LM {precision['lm']}, decoder {precision['decoder']}"
        f"{', decoder in a second process' if pipeline else ''}: first audio {report.first_audio_ms:.1f} "
        f"ms after the text, per frame median LM {summary['lm_median_ms']:.2f} ms + decoder "
        f"{summary['decode_median_ms']:.2f} ms, real-time factor {report.real_time_factor:.3f}"
        + (f"; {report.split_chunks} chunk(s) split at words to fit the cache" if report.split_chunks else "")
    )
    return summary


@app.command()
def stream(
    program: Annotated[Path, typer.Argument(help="a step program (.pte): latent [1, 1, D] -> pcm [1, 1, N] per call")],
    latents: Annotated[
        Path | None, typer.Option("--latents", help="a .npy file of [frames, D] float32 latents")
    ] = None,
    frames: Annotated[int, typer.Option("--frames", min=1, help="without --latents: this many random frames")] = 25,
    pcm: PcmOut = False,
    output: WavFile = None,
    json_path: JsonFile = None,
    threads: Threads = 1,
    frames_per_call: Annotated[
        int | None,
        typer.Option("--frames-per-call", min=1, help="frames a call: the step's (pocket-tts:CONFIG?frames=N)"),
    ] = None,
) -> None:
    """Decode frame by frame through a step program, as a TTS runner does; the summary goes to stderr.

    phaseconv stream step.pte --latents z.npy --pcm | aplay -f S16_LE -r 24000 -c 1
    """
    from phaseconv.runtimes.executorch import set_threads
    from phaseconv.stream import StepProgram, load_latents, random_latents, stream, write_wav

    audio_destination(pcm, output)
    for path in (output, json_path):
        if path is not None:
            require_folder(path)
    values = load_latents(latents) if latents is not None else None
    with parked_stderr(quiet()):  # the runtime's CPU probing on load
        set_threads(threads)
        step = StepProgram(program)
    if frames_per_call is not None and frames_per_call != step.frames_per_call:
        raise PhaseconvError(
            f"{program} decodes {step.frames_per_call} frame(s) a call; lower pocket-tts:CONFIG?frames="
            f"{frames_per_call} for {frames_per_call}"
        )
    if latents is None:
        frames = -(-frames // step.frames_per_call) * step.frames_per_call  # whole calls
    source = str(latents or "the random latents")
    values = step.check_latents(values if values is not None else random_latents(frames, step.latent_dim), source)
    deliver, chunks = audio_sink(pcm)
    report = stream(step, values, deliver)
    if output is not None:
        write_wav(output, b"".join(chunks), report.sample_rate)
    if json_path is not None:
        write_atomically(json_path, json.dumps(report.to_dict() | {"threads": threads}, indent=2).encode())
    seconds = report.frames * report.samples_per_frame / report.sample_rate
    note(
        f"{report.frames} frames ({seconds:.2f} s of audio, {step.frames_per_call} a call) at {threads} thread(s): "
        "first audio "
        f"{report.first_audio_ms:.2f} ms after its latent (load {report.load_ms:.0f} ms), per frame median "
        f"{report.median_ms:.2f} ms, p95 {report.p95_ms:.2f} ms, real-time factor {report.real_time_factor:.3f}"
    )
