"""Text to speech end to end: pocket-tts's whole model as one ExecuTorch program (phaseconv lower
pocket-tts-tts:CONFIG, spoken by phaseconv's runner) against pocket-tts's own eager generation.

    python benchmarks/tts.py [--configs english_2m_2026-10,english_18m_2026-10,english_2026-09]
                             [--threads 1,2] [--quantize english_2026-09=8da4w+8da4w/int8] [--runs 3]
                             [--json results/tts.json]

Per config and thread count (one worker process each: XNNPACK's pool is sized before any load),
the worker pinned to as many cores as threads (taskset's affinity, which the decoder's thread and
process and the C++ runner inherit): "1 thread" is everything on one core, every variant alike.
random weights (seeded), a stand-in tokenizer of the config's n_bins pieces and a synthesized voice
prompt (phaseconv/tts/stand_ins.py; the hub is out of reach). The program is lowered fp32 and,
where --quantize asks, with the language model's linears in 8da4w or 8da8w and the decoder in int8
(`lower pocket-tts-tts:CONFIG --quantize-decoder int8`). The same texts are then spoken, one run of
each variant in turn:

- pocket-tts eager: `TTSModel.generate_audio_stream`, its language model and its decoder on two
  threads (torch at the worker's thread count, as pocket-tts sets it);
- eager LM + phaseconv decoder: pocket-tts's language model in eager, each frame decoded by the
  program's `decode` (what the decoder step alone gives);
- phaseconv program: the runner, every model call an ExecuTorch method, one call after the other;
- phaseconv Python API: the fp32 program through `TTSModel.generate_audio_stream` (pocket-tts's calls;
  generation on a thread of its own, the voice state put in the cache at each call, as pocket-tts's
  copies its state), its first chunk against the runner's first audio;
- each program again with its decoder in a second process: the runner's `--pipeline`, the language
  model in this process and the decoder in another (the same file loaded again), each at the
  worker's threads;
- sherpa-onnx 2.0.1 (PyPI), where its runner takes the config (text embeddings 1024 wide: english):
  the same weights exported to its five ONNX files by phaseconv.models.pocket_tts.sherpa_onnx (a
  port of its exporter; at temperature 0 it speaks pocket-tts's samples, tests/tts/test_sherpa_onnx.py),
  fp32 and its int8 (dynamic int8 on the matrix products of lm_main, lm_flow and decoder), its
  sessions at the worker's threads. It generates a sentence's frames, then decodes them; its end of
  speech (a fixed logit > -4) is off in the export and its `max_frames` gives each sentence its
  share of the frames pocket-tts spoke for the text;
- each program through the C++ runner (`./dev runner`: runner/build/phaseconv-tts, its decoder on a
  thread of its own, `--threads` the worker's), a process per run; its own summary gives the figures.

With random weights the end-of-speech logit is meaningless: it is disabled (threshold +inf) for every
variant, so each speaks pocket-tts's maximum number of frames for the text, (tokens / 3 + 2) s.
Reported per run: frames, time to first audio from the text (the voice prompt, once per voice, is
timed apart), real-time factor (generation time over audio duration), per-frame medians of the LM
and decoder calls. Then, for each program, resident memory in a fresh process that only loads it
and speaks one sentence in a voice (XNNPACK's weight cache on, as the runner loads), against its
file size (and the C++ runner's peak resident memory speaking the same sentence, against the file
and beside the binary's size), and for each quantized program, its audio's SNR against the fp32 program's at
temperature 0 and the frames its end of speech came at under the config's rule.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import tts as tts_tables  # noqa: E402
from benchmarks.workers import library_code_mib, resident_mib, save_results, worker_rows  # noqa: E402

console = Console(width=200)
TEXTS = {
    "10 words": "The quick brown fox jumps over the lazy dog twice today.",
    "3 sentences": (
        "Small models can speak in real time on a phone. They generate one frame every eighty "
        "milliseconds. This sentence is the last of three."
    ),
}
DEFAULT_CONFIGS = "english_2m_2026-10,english_18m_2026-10,english_2026-09"
PIPELINED = ", decoder in a second process"
RUNNER = Path(__file__).resolve().parent.parent / "runner" / "build" / "phaseconv-tts"
CPP = "C++ runner: "
API = "phaseconv Python API (generate_audio_stream)"
SHERPA = "sherpa-onnx 2.0.1 "
FIRST = ("prompt", "decode")


def cpp_speech(path: str, text: str, wav: Path, threads: int) -> tuple[dict, float]:
    """The C++ runner speaking `text` with the program in a process of its own, temperature 0 and end
    of speech disabled: its summary, and the process's peak resident memory (MiB)."""
    with tempfile.TemporaryDirectory() as folder:
        # peak memory by GNU time: a child forked from this process would count this one's pages as its own
        command = ["/usr/bin/time", "-f", "%M", "-o", f"{folder}/peak_kib", str(RUNNER), path, text, "--voice"]
        command += [str(wav), "--temperature", "0", "--eos-threshold", "inf", "--threads", str(threads)]
        command += ["-o", f"{folder}/out.wav", "--json", f"{folder}/summary.json"]
        with open(f"{folder}/stderr", "w") as stderr:
            status = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=stderr).returncode
        if status != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{Path(folder, 'stderr').read_text()[-3000:]}")
        peak_kib = int(Path(folder, "peak_kib").read_text().split()[-1])
        return json.loads(Path(folder, "summary.json").read_text()), peak_kib / 1024


def memory_worker(program: Path, tokenizer: Path) -> None:
    """In a fresh process: resident memory before the load, after it, and after one sentence spoken
    in the voice beside the tokenizer (its prompt encoded: every method has run), the runner's code
    (pocket-tts's text handling: 81 MiB of modules) imported before; of the growth, the pages of
    library code the runner ran (libtorch's, reading the voice), which are not the program's; then
    the time a decoder reset takes."""
    from phaseconv.runtimes.executorch import set_threads

    set_threads(1)
    import pocket_tts.models.text_chunking  # noqa: F401
    import pocket_tts.models.tts_model  # noqa: F401

    import phaseconv.tts.build  # noqa: F401
    from phaseconv.tts.loaded import SpeechProgram
    from phaseconv.tts.speaker import Speaker, SpeechReport
    from phaseconv.tts.voices import AudioVoice

    before, code_before = resident_mib(), library_code_mib(program)
    speech = SpeechProgram(program)
    loaded = resident_mib()
    speaker = Speaker(speech, 0.0)
    speaker.set_voice(AudioVoice.read(tokenizer.parent / "voice.wav", 24000, 1920))
    speaker.speak(TEXTS["10 words"], lambda pcm: None, SpeechReport(0, 0, 24000, 1920, 0.0))
    spoken = resident_mib()
    memory = {
        "load_mib": loaded - before,
        "first_utterance_mib": spoken - before,
        "library_code_mib": library_code_mib(program) - code_before,
        "reset_ms": _reset_ms(speech),
    }
    print(json.dumps(memory))


def memory_row(config: str, name: str, path: str, lowering_s: float, tokenizer: Path) -> dict:
    """The program's memory_worker figures, measured in a process of their own, its file's size and
    what its plans reserve."""
    from phaseconv.runtimes.pte import planned_bytes

    command = [sys.executable, __file__, "--memory", path, "--tokenizer", str(tokenizer)]
    process = subprocess.run(command, capture_output=True, text=True)
    if process.returncode != 0:  # say why, and keep the other rows
        raise SystemExit(f"the memory measurement of {path} failed:\n{process.stderr[-3000:]}")
    memory = json.loads(process.stdout.splitlines()[-1])
    file_mib = Path(path).stat().st_size / 2**20
    methods, state = planned_bytes(Path(path).read_bytes())
    row = {"config": config, "threads": 1, "variant": name, "file_mib": file_mib, "lowering_s": lowering_s}
    if RUNNER.is_file():  # the same sentence in the same voice, as memory_worker speaks it
        _, row["cpp_peak_mib"] = cpp_speech(path, TEXTS["10 words"], tokenizer.parent / "voice.wav", 1)
    return row | {"planned_methods_mib": methods / 2**20, "planned_state_mib": state / 2**20} | memory


class EagerLmProgramDecoder:
    """pocket-tts's language model in eager (its own prompting and sampling code), each latent decoded
    by the program's `decode` method: the decoder half alone, frame after frame in one thread."""

    def __init__(self, tts, speech):
        self.tts, self.speech = tts, speech

    def speak(self, voice_state, text: str, on_frame) -> None:
        import copy

        import torch
        from pocket_tts.models import text_chunking

        tts = self.tts
        options = (
            tts.pad_with_spaces_for_short_inputs,
            tts.remove_semicolons,
            tts.append_terminal_punctuation,
            tts.capitalize_first_letter,
            tts.replace_characters,
        )
        tokenizer = tts.flow_lm.conditioner.tokenizer
        for piece in text_chunking.split_into_best_sentences(tokenizer, text, 50, *options):
            chunk, _ = text_chunking.prepare_text_prompt(piece, *options)
            state = copy.deepcopy(voice_state)
            prepared = tts.flow_lm.conditioner.prepare(chunk)
            limit = tts._estimate_max_gen_len(prepared.shape[1])
            tts._expand_kv_cache(state, tts._flow_lm_current_end(state) + prepared.shape[1] + limit)
            with torch.no_grad():
                tts._run_flow_lm_and_increment_step(model_state=state, text_tokens=prepared)
                self.speech.reset_decoder()
                latent = torch.full((1, 1, tts.flow_lm.ldim), float("nan"))
                for _ in range(limit):  # EOS disabled: pocket-tts's maximum
                    latent, _ = tts._run_flow_lm_and_increment_step(model_state=state, backbone_input_latents=latent)
                    on_frame(self.speech.decode(latent)[0])


def worker(config: str, threads: int, runs: int, folder: Path, out: Path) -> None:
    import os

    from phaseconv.runtimes.executorch import set_threads

    os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:threads]))  # its processes and threads inherit it
    set_threads(threads)  # before any program is loaded
    import dataclasses

    import torch

    from phaseconv.tts.decoding import DecoderProcess
    from phaseconv.tts.loaded import SpeechProgram
    from phaseconv.tts.source import build_tts
    from phaseconv.tts.speaker import Speaker, SpeechReport
    from phaseconv.tts.tts_model import TTSModel
    from phaseconv.tts.voices import AudioVoice

    torch.set_num_threads(threads)
    tokenizer, wav = folder / "tokenizer.model", folder / "voice.wav"
    tts = build_tts(config, tokenizer=tokenizer)
    tts.temp, tts.eos_threshold = 0.0, math.inf
    voice_state = tts.get_state_for_audio_prompt(wav)
    programs = json.loads((folder / "programs.json").read_text())
    loaded = {name: SpeechProgram(Path(path)) for name, (path, _) in programs.items()}
    speakers = {}
    for name, speech in loaded.items():
        speaker = Speaker(speech, 0.0)
        speaker.settings = dataclasses.replace(speaker.settings, eos_threshold=math.inf)
        speaker.set_voice(AudioVoice.read(wav, 24000, 1920))
        speakers[name] = speaker
    hybrid = EagerLmProgramDecoder(tts, loaded["phaseconv program"])
    api = TTSModel(loaded["phaseconv program"], 0.0, math.inf)  # the same voice the speakers hold
    api_state = api.get_state_for_audio_prompt(wav)
    pipelined = {name + PIPELINED: DecoderProcess(Path(path), threads) for name, (path, _) in programs.items()}
    speakers |= {name + PIPELINED: speakers[name] for name in programs}
    cpp = {CPP + name: path for name, (path, _) in programs.items()} if RUNNER.is_file() else {}
    sherpa = sherpa_speakers(folder, threads, wav)
    rows = []
    for label, text in TEXTS.items():
        chunked = speakers["phaseconv program"]  # every program here reads the same tokenizer
        counts = [int(chunked.tokenizer(chunk).shape[1]) for chunk, *_ in chunked.chunks(text)]
        tokens = {"tokens": sum(counts), "first_chunk_tokens": counts[0]}  # the prompt first audio waits for
        for run in range(runs):
            for name in ("pocket-tts eager", "eager LM + phaseconv decoder", API, *speakers, *cpp, *sherpa):
                frames, first, started = [], [], time.perf_counter()

                def on_frame(pcm, frames=frames, first=first, started=started):
                    if not first:
                        first.append((time.perf_counter() - started) * 1e3)
                    frames.append(pcm.numel())

                report = None
                if name in cpp:
                    summary, _ = cpp_speech(cpp[name], text, wav, threads)
                    rows.append(cpp_row(config, threads, label, run, name, summary) | tokens)
                    continue
                if name == "pocket-tts eager":
                    for chunk in tts.generate_audio_stream(voice_state, text):
                        on_frame(chunk)
                    spoken = sum(frames) // tts.mimi.frame_size
                elif name in sherpa:
                    sherpa[name](tts, text, spoken, lambda samples, _: on_frame(torch.from_numpy(samples)) or 1)
                elif name == "eager LM + phaseconv decoder":
                    hybrid.speak(voice_state, text, on_frame)
                elif name == API:
                    for chunk in api.generate_audio_stream(api_state, text):
                        on_frame(chunk)
                else:
                    speaker = speakers[name]
                    report = SpeechReport(0, 0, 24000, 1920, 0.0)
                    speaker.speak(text, on_frame, report, pipelined.get(name))
                total = (time.perf_counter() - started) * 1e3
                seconds = sum(frames) / 24000
                rows.append(
                    {
                        "config": config,
                        "threads": threads,
                        "text": label,
                        "run": run,
                        "variant": name,
                        "audio_seconds": seconds,
                        "first_audio_ms": first[0],
                        "total_ms": total,
                        "real_time_factor": total / 1e3 / seconds,
                        "lm_median_ms": statistics.median(report.lm_ms) if report else None,
                        "decode_median_ms": statistics.median(report.decode_ms) if report else None,
                        "prompt_median_ms": statistics.median(report.prompt_ms) if report else None,
                        # first audio's path: the first chunk's prompt (its last call runs the first frame), a decode
                        **({f"first_{part}_ms": getattr(report, f"{part}_ms")[0] for part in FIRST} if report else {}),
                    }
                    | tokens
                )
                print(f"{label} {run} {name}", flush=True)
    for name, decoder in pipelined.items():
        decoder.close()
        del speakers[name]
    if threads == 1:
        rows += quality_rows(config, loaded, tokenizer, wav)
    for name, (path, lowering_s) in programs.items() if threads == 1 else ():  # memory: once per program
        rows.append(memory_row(config, name, path, lowering_s, tokenizer))
    out.write_text(json.dumps(rows))


def sherpa_speakers(folder: Path, threads: int, wav: Path) -> dict:
    """sherpa-onnx on the files export_sherpa wrote, by variant: a function that speaks a text in the
    frames pocket-tts spoke for it. sherpa-onnx splits the text at sentence ends and gives each
    sentence `max_frames`, so each gets its share of the frames; the voice's encoding, which it caches,
    is done before (a first call), as the other variants set their voice once."""
    import re

    from pocket_tts.models.text_chunking import prepare_text_prompt

    from phaseconv.models.pocket_tts import sherpa_onnx

    voice = sherpa_onnx.voice_audio(wav, 24000)
    speakers = {}
    for name, files in json.loads((folder / "sherpa.json").read_text()).items():
        engine = sherpa_onnx.engine({field: Path(path) for field, path in files.items()}, threads)
        engine.generate("Hello.", sherpa_onnx.generation(voice, 24000, 2, 1))

        def speak(tts, text, frames, on_chunk, engine=engine):
            prepared, _ = prepare_text_prompt(text, tts.pad_with_spaces_for_short_inputs, tts.remove_semicolons)
            each = math.ceil(frames / len(re.findall(r"[.!?]+(?:\s|$)", prepared)))
            engine.generate(prepared, sherpa_onnx.generation(voice, 24000, each, tts.sampler_decode_steps), on_chunk)

        speakers[name] = speak
    return speakers


def cpp_row(config: str, threads: int, text: str, run: int, name: str, summary: dict) -> dict:
    keys = ("audio_seconds", "first_audio_ms", "total_ms", "real_time_factor", "lm_median_ms", "decode_median_ms")
    keys += ("prompt_median_ms",)
    return {"config": config, "threads": threads, "text": text, "run": run, "variant": name} | {
        key: summary[key] for key in keys
    }


def quality_rows(config: str, loaded: dict, tokenizer: Path, wav: Path) -> list[dict]:
    """Each quantized program against the fp32 one at temperature 0 on the three sentences: the SNR of
    its audio (end of speech disabled, so both speak the same frames), and the frame each chunk's end
    of speech came at under the config's own rule."""
    import dataclasses

    import torch

    from phaseconv.tts.speaker import Speaker, SpeechReport
    from phaseconv.tts.voices import AudioVoice

    def speak(speech, eos: bool) -> tuple[torch.Tensor, list]:
        speaker = Speaker(speech, 0.0)
        if not eos:
            speaker.settings = dataclasses.replace(speaker.settings, eos_threshold=math.inf)
        speaker.set_voice(AudioVoice.read(wav, 24000, 1920))
        pcm, report = [], SpeechReport(0, 0, 24000, 1920, 0.0)
        speaker.speak(TEXTS["3 sentences"], lambda frame: pcm.append(frame.flatten().clone()), report)
        return torch.cat(pcm), report.eos_frames

    reference, reference_eos = speak(loaded["phaseconv program"], eos=False)[0], None
    rows = []
    for name, speech in loaded.items():
        if name == "phaseconv program":
            continue
        audio = speak(speech, eos=False)[0]
        noise = (audio - reference).pow(2).sum().item()
        reference_eos = reference_eos or speak(loaded["phaseconv program"], eos=True)[1]
        rows.append(
            {
                "config": config,
                "variant": name,
                "snr_db_vs_fp32": 10 * math.log10(reference.pow(2).sum().item() / noise) if noise else math.inf,
                "eos_frames": speak(speech, eos=True)[1],
                "fp32_eos_frames": reference_eos,
            }
        )
    return rows


def _reset_ms(speech) -> float:
    """The median of 20 calls of reset_decoder, what starting a chunk costs beyond its prompt."""
    times = []
    for _ in range(20):
        started = time.perf_counter()
        speech.reset_decoder()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def lower_programs(config: str, schemes: list[str], folder: Path) -> None:
    """The config's programs (fp32, and each scheme's), a stand-in tokenizer and a voice, in `folder`."""
    from phaseconv.models.pocket_tts import hub
    from phaseconv.tts.build import lower_tts
    from phaseconv.tts.source import random_model
    from phaseconv.tts.stand_ins import stand_in_tokenizer, stand_in_voice

    tokenizer = stand_in_tokenizer(folder / "tokenizer.model", hub.load_config(config).flow_lm.lookup_table.n_bins)
    stand_in_voice(folder / "voice.wav", seconds=4.0)
    programs = {}
    for scheme in [None, *schemes]:
        lm, decoder = quantization(scheme)
        name = "phaseconv program" + (f", {lm} LM" if lm else "") + (f", {decoder} decoder" if decoder else "")
        with console.status(f"{config}: lowering the {name}"):
            started = time.perf_counter()
            path = folder / f"{(scheme or 'fp32').replace('/', '_')}.pte"
            model = random_model(config, tokenizer)
            lowered, _ = lower_tts(model, quantize=lm, quantize_decoder=decoder, target="host")
            lowered.save(path)
            programs[name] = (str(path), time.perf_counter() - started)
    (folder / "programs.json").write_text(json.dumps(programs))
    export_sherpa(config, tokenizer, folder)


def export_sherpa(config: str, tokenizer: Path, folder: Path) -> None:
    """sherpa-onnx's files for the config's weights (the worker's, seed 0), fp32 and int8, listed in
    sherpa.json; none where sherpa-onnx cannot run the config (its runner takes 1024-wide text only)."""
    from phaseconv.models.pocket_tts import sherpa_onnx
    from phaseconv.tts.source import build_tts

    tts, files = build_tts(config, tokenizer=tokenizer), {}
    if tts.flow_lm.dim == sherpa_onnx.SHERPA_TEXT_WIDTH:
        with console.status(f"{config}: exporting sherpa-onnx's files"):
            (folder / "sherpa").mkdir()
            fp32 = sherpa_onnx.export(tts, tokenizer, folder / "sherpa", end_of_speech=False)
            files = {SHERPA + "fp32": fp32, SHERPA + "int8": sherpa_onnx.quantized(fp32, folder / "sherpa")}
    listed = {name: {field: str(path) for field, path in paths.items()} for name, paths in files.items()}
    (folder / "sherpa.json").write_text(json.dumps(listed))


def quantization(scheme: str | None) -> tuple[str | None, str | None]:
    """A --quantize scheme, LM[/decoder] ("8da4w", "8da4w/int8", "fp32/int8"), as (LM's, decoder's)."""
    lm, _, decoder = (scheme or "").partition("/")
    return (None if lm in ("", "fp32") else lm), (decoder or None)


def main(
    configs: str = typer.Option(DEFAULT_CONFIGS, help="pocket-tts configs, comma-separated"),
    threads: str = typer.Option("1,2", help="thread counts, comma-separated"),
    quantize: str = typer.Option(
        "english_18m_2026-10=fp32/int8+8da4w/int8,english_2026-09=8da4w+8da4w/int8",
        help="config=scheme[+scheme]: also lower that config quantized; a scheme is the LM's linears' (8da4w, "
        "8da8w or fp32), then optionally /int8 for the decoder (static int8, calibrated on the LM's latents)",
    ),
    runs: int = typer.Option(3, min=1, help="runs of each variant per text"),
    json_path: Path = typer.Option(Path("results/tts.json"), "--json", help="where to write the results"),
    is_worker: bool = typer.Option(False, "--worker", hidden=True),
    memory: Path | None = typer.Option(None, "--memory", hidden=True),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", hidden=True),
    folder: Path | None = typer.Option(None, "--folder", hidden=True),
    memory_only: bool = typer.Option(
        False, "--memory-only", help="lower the programs and measure their memory only (the other rows stay)"
    ),
) -> None:
    schemes = dict(item.split("=") for item in quantize.split(",") if item)
    if memory is not None:
        memory_worker(memory, tokenizer)
        return
    if is_worker:
        worker(configs, int(threads), runs, folder, json_path)
        return
    rows = []
    for config in configs.split(","):
        with tempfile.TemporaryDirectory() as programs:
            lower_programs(config, [s for s in schemes.get(config, "").split("+") if s], Path(programs))
            if memory_only:
                listed = json.loads((Path(programs) / "programs.json").read_text()).items()
                tokenizer = Path(programs) / "tokenizer.model"
                rows += [memory_row(config, name, path, seconds, tokenizer) for name, (path, seconds) in listed]
                continue
            for count in threads.split(","):
                arguments = ["--configs", config, "--threads", count, "--runs", str(runs), "--folder", programs]
                rows += worker_rows(__file__, arguments, f"{config}, {count} thread(s): speaking", console)
    measured = (lambda row: (row["config"], "file_mib" in row)) if memory_only else (lambda row: row["config"])
    binary = {"runner_binary_mib": RUNNER.stat().st_size / 2**20} if RUNNER.is_file() else {}
    from phaseconv.targets import host_target

    save_results(
        json_path, rows, partial_key=measured, runs=runs, texts=TEXTS, target=host_target(), threads=threads, **binary
    )
    print(tts_tables(json.loads(json_path.read_text())))  # the tables the docs show
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
