"""Real models, stock ExecuTorch vs phaseconv, through the runtime at 1 and 2 threads.

    python benchmarks/models.py [--threads 1,2] [--runs 10] [--only mimi] [--json results/models.json]
                                [--plot results/models.png] [--no-litert] [--memory]

Per model: export the model as built and lower it with stock ExecuTorch (XNNPACK); export
phaseconv.prepare(model) and lower it stock and after phaseconv.rewrite; export the prepared program
to ONNX as it is and with phaseconv.export_onnx, for ONNX Runtime, and to .tflite as it is and with
phaseconv.export_litert, for LiteRT (the peers, same thread count; LiteRT unless --no-litert); run
each program against eager PyTorch (the model as built), then time all of them and eager PyTorch
interleaved. XNNPACK's thread pool is sized once per process, so each thread count runs in its own
worker process (this script with --worker). With --memory, at one thread: the resident memory the
stock and phaseconv programs add at load and by their first call, each loaded alone from its file in
a fresh process (an allocator that served earlier work would hide growth), under the runtime's
default loader and with XNNPACK's weight cache; where the phaseconv program's operators share
weights (an unrolled LSTM), also as `phaseconv lower --no-weight-cache` lowers it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.workers import machine, resident_mib, run_record, saved_rows  # noqa: E402
from phaseconv.models import diffusers_vae, image, stylegan, transformers_audio, unet, vocos  # noqa: E402
from phaseconv.targets import host_target  # noqa: E402

# The stock program phaseconv is compared with: the model as built when it lowers; if it does not
# (tensor-valued conv settings), with only those made static; then the prepared model; then folded;
# for a model no stock runtime runs (Vocos's complex spectrum), the network, its iSTFT in PyTorch.
ISTFT_IN_PYTORCH = "stock, iSTFT in PyTorch"
BASELINES = (
    "stock, as built",
    "stock, weight_norm kept",
    "stock, prepared",
    "stock, constants folded",
    ISTFT_IN_PYTORCH,
)
LABELS = dict(zip(BASELINES, ("", " (w)", " (p)", " (f)", " (t)")))
PCM_STEP = 1 / 32768  # one step of 16-bit audio at full scale
ORT_STOCK, ORT_PHASECONV = "ONNX Runtime, stock export", "ONNX Runtime, phaseconv export"
LITERT_STOCK, LITERT_PHASECONV = "LiteRT, stock conversion", "LiteRT, phaseconv export"
console = Console(width=200)


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: object  # () -> (nn.Module, inputs)
    sample_rate: int | None = None  # audio models: output samples per second
    # (module) -> (network, tail) when no stock runtime runs the model: each runs the network and
    # eager PyTorch the tail (the stock baselines and peers)
    split_for_stock: object = None


class SpectrumParts(torch.nn.Module):
    """Vocos up to its iSTFT: mel -> the spectrum's real and imaginary parts (vocos.heads.ISTFTHead's
    forward, with the two products written out)."""

    def __init__(self, vocoder):
        super().__init__()
        self.vocoder = vocoder

    def forward(self, mel):
        head = self.vocoder.head
        magnitude, phase = head.out(self.vocoder.backbone(mel)).transpose(1, 2).chunk(2, dim=1)
        magnitude = torch.clip(torch.exp(magnitude), max=1e2)
        return magnitude * torch.cos(phase), magnitude * torch.sin(phase)


def istft_in_pytorch(vocoder) -> tuple[torch.nn.Module, object]:
    """Vocos as a stock runtime can run it: the network up to the spectrum, and torch.istft in the app."""
    return SpectrumParts(vocoder), lambda real, imaginary: vocoder.head.istft(torch.complex(real, imaginary))


CASES = [
    ModelCase("Mimi decoder, 1 frame (80 ms)", partial(transformers_audio.mimi_latents_decoder, 1), 24000),
    ModelCase("Mimi decoder, 25 frames (2 s)", partial(transformers_audio.mimi_latents_decoder, 25), 24000),
    ModelCase("Mimi decode(codes), 25 frames", partial(transformers_audio.mimi_codes_decoder, 25), 24000),
    ModelCase("EnCodec 24 kHz decoder, 1 s", partial(transformers_audio.encodec_decoder, 1.0), 24000),
    ModelCase("DAC decoder, 1 s", partial(transformers_audio.dac_decoder, 1.0), 16000),
    ModelCase("SpeechT5 HiFi-GAN, 100 frames", partial(transformers_audio.hifigan, 100), 16000),
    ModelCase("HiFi-GAN V1, 100 frames", partial(transformers_audio.hifigan, 100, "v1"), 22050),
    ModelCase("MI-GAN-like 128x128", image.migan_generator),
    ModelCase("StyleGAN2-like 128x128", stylegan.stylegan2_generator),
    ModelCase("U-Net 128x128, ConvTranspose2d(k2, s2)", unet.unet),
    ModelCase("SD 1.x VAE decoder, 32x32 latents", partial(diffusers_vae.vae_decoder, 32)),
    ModelCase("SD VAE decoder (small), 32x32 latents", partial(diffusers_vae.vae_decoder, 32, diffusers_vae.SMALL)),
    ModelCase("Vocos mel-24khz, 94 frames (1 s)", partial(vocos.mel_vocoder, 94), 24000, istft_in_pytorch),
]


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:160] if text else ''}"


def peer_exports(litert: bool) -> list[tuple[dict, type]]:
    """The peers, each as (name -> export of a prepared program, its session): ONNX Runtime's stock
    export and phaseconv.export_onnx; LiteRT's stock conversion and export_litert when `litert`."""
    import phaseconv
    from phaseconv.peers import PEERS

    onnx = PEERS["onnx"]()
    peers = [({ORT_STOCK: onnx.convert, ORT_PHASECONV: lambda ep: phaseconv.export_onnx(ep)[0]}, onnx.session)]
    if litert:
        tflite = PEERS["litert"]()
        exports = {
            LITERT_STOCK: tflite.convert,
            LITERT_PHASECONV: lambda ep: phaseconv.export_litert(ep, target="host")[0],
        }
        peers.append((exports, tflite.session))
    return peers


@dataclass(frozen=True)
class WithTail:
    """A program whose outputs `tail` finishes in eager PyTorch: run(inputs) -> (tail(*outputs),)."""

    program: object
    tail: object

    def run(self, inputs):
        return (self.tail(*self.program.run(inputs)),)


def memory_worker(program: Path, inputs: Path, weight_cache: bool) -> None:
    """In a fresh process: the resident MiB a program file adds by its load and by its first call."""
    from phaseconv.runtimes.executorch import set_threads

    set_threads(1)
    from phaseconv.runtimes.executorch import LoadedProgram

    tensors = torch.load(inputs)
    before = resident_mib()
    loaded = LoadedProgram(program.read_bytes(), weight_cache=weight_cache)
    at_load = resident_mib()
    loaded.run(tensors)
    print(json.dumps({"load_mib": at_load - before, "first_call_mib": resident_mib() - before}))


LOADERS = {"default loader": False, "weight cache": True}
NO_WEIGHT_CACHE = "phaseconv, lower --no-weight-cache"


def resident_growth(buffers: dict[str, bytes], inputs) -> dict:
    """{program: {loader: {load_mib, first_call_mib}}}, each program alone in a fresh process per loader."""
    growth = {}
    with tempfile.TemporaryDirectory() as folder:
        saved_inputs = Path(folder) / "inputs.pt"
        torch.save(tuple(inputs), saved_inputs)
        for name, buffer in buffers.items():
            path = Path(folder) / "program.pte"
            path.write_bytes(buffer)
            growth[name] = {}
            for loader, cache in LOADERS.items():
                command = [sys.executable, __file__, "--memory-of", str(path), "--json", str(saved_inputs)]
                command.append("--weight-cache" if cache else "--no-weight-cache")
                process = subprocess.run(command, capture_output=True, text=True)
                if process.returncode != 0:
                    raise SystemExit(f"the memory measurement of {name} failed:\n{process.stderr[-3000:]}")
                growth[name][loader] = json.loads(process.stdout.splitlines()[-1])
    return growth


def measure(case: ModelCase, threads: int, runs: int, on_round, litert: bool = False, memory: bool = False) -> dict:
    """Every program of one model: delegation, error against eager, interleaved medians; LiteRT's
    two conversions too when `litert`; resident memory of the stock and phaseconv programs when
    `memory` (at one thread)."""
    import phaseconv
    from phaseconv.lowering.xnnpack import PHASECONV_LOWERING, to_xnnpack
    from phaseconv.rewrite import rewrite_with_report
    from phaseconv.rules import TARGET_RULES
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import summarize_pte
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    module, inputs = case.build()
    with torch.no_grad():
        expected = module(*inputs)
    prepared = phaseconv.prepare(module)
    programs, failures = {}, {}
    try:
        programs["stock, as built"] = torch.export.export(module, inputs)
    except Exception as error:
        failures["stock, as built"] = f"export: {_first_line(error)}"
        if any(torch.nn.utils.parametrize.is_parametrized(m) or hasattr(m, "weight_g") for m in module.modules()):
            static = phaseconv.prepare(module, bake_weight_norm=False)
            programs["stock, weight_norm kept"] = torch.export.export(static, inputs)
    ep = torch.export.export(prepared, inputs)
    programs["stock, prepared"] = ep
    fast, decisions = rewrite_with_report(ep, TARGET_RULES[host_target()])  # as phaseconv.lower(target="host")
    programs["phaseconv"] = fast
    loaded, summaries, errors, buffers = {}, {}, {}, {}

    def lower_and_run(name, program, tail=None) -> bool:
        try:
            buffer = to_xnnpack(program, **(PHASECONV_LOWERING if name == "phaseconv" else {})).buffer
            program = LoadedProgram(buffer) if tail is None else WithTail(LoadedProgram(buffer), tail)
            (output,) = program.run(inputs)
        except Exception as error:
            failures[name] = f"lowering or running: {_first_line(error)}"
            return False
        summaries[name], buffers[name], loaded[name] = summarize_pte(buffer).to_dict(), buffer, program
        errors[name] = float((output.float() - expected.float()).abs().max())
        return True

    for name, program in programs.items():
        lower_and_run(name, program)
    if "stock, prepared" not in loaded:  # e.g. a partitioner failure: compare with folding alone
        lower_and_run("stock, constants folded", phaseconv.rewrite(ep, ["fold_constants"]))
    network, tail = case.split_for_stock(module) if case.split_for_stock else (None, None)
    network_ep = None if network is None else torch.export.export(network, inputs)
    if network_ep is not None and not any(name in loaded for name in BASELINES):
        lower_and_run(ISTFT_IN_PYTORCH, network_ep, tail)
    for exports, session in peer_exports(litert):  # the peers, same threads
        for name, export in exports.items():
            try:
                loaded[name] = session(export(ep), threads)
            except Exception as error:
                if network_ep is None:
                    raise
                failures[name] = f"export: {_first_line(error)}"
                loaded[name] = WithTail(session(export(network_ep), threads), tail)
            errors[name] = float((loaded[name].run(inputs)[0].float() - expected.float()).abs().max())
    torch.set_num_threads(threads)
    runners = {name: partial(program.run, inputs) for name, program in loaded.items()}
    runners["eager PyTorch"] = partial(torch.no_grad()(module), *inputs)
    ms = {name: median_ms(samples) for name, samples in interleaved_times(runners, runs, 2, on_round).items()}
    baseline = next(name for name in BASELINES if name in ms)
    row = {
        "model": case.name,
        "threads": threads,
        "runs": runs,
        "ms": ms,
        "baseline": baseline,
        "speedup": ms[baseline] / ms["phaseconv"],
        "speedup_vs_prepared_stock": ms["stock, prepared"] / ms["phaseconv"] if "stock, prepared" in ms else None,
        "vs_eager": ms["eager PyTorch"] / ms["phaseconv"],
        "vs_ort": ms[ORT_STOCK] / ms["phaseconv"],
        "vs_ort_phaseconv_export": ms[ORT_PHASECONV] / ms["phaseconv"],
        "ort_export_gain": ms[ORT_STOCK] / ms[ORT_PHASECONV],
        "max_abs_error": errors,
        "failures": failures,
        "delegation": summaries,
        "rewritten": dict(Counter(d.rule for d in decisions if d.applied)),
        "declined": [d.to_dict() for d in decisions if not d.applied],
    }
    if memory and threads == 1:
        measured = {name: buffers[name] for name in (baseline, "phaseconv")}
        if summaries["phaseconv"]["repacked_weights"]:  # operators share weights: the lean lowering too,
            # of a fresh rewrite (lowering `fast` took the constants the rewrite made out of it)
            again = rewrite_with_report(ep, TARGET_RULES[host_target()])[0]
            measured[NO_WEIGHT_CACHE] = to_xnnpack(again, **PHASECONV_LOWERING, weight_cache=False).buffer
        row["memory"] = resident_growth(measured, inputs)
    if litert:
        row["vs_litert"] = ms[LITERT_STOCK] / ms["phaseconv"]
        row["litert_export_gain"] = ms[LITERT_STOCK] / ms[LITERT_PHASECONV]
    if case.sample_rate:
        seconds = expected.shape[-1] / case.sample_rate
        row["audio_seconds"] = seconds
        row["real_time_factor"] = ms["phaseconv"] / 1e3 / seconds
        # Random weights give waveforms of any amplitude (HiFi-GAN's init: 1e-5, Mimi's: 10): the error
        # is counted in 16-bit steps of the waveform scaled to full scale (peak 1).
        row["peak"] = float(expected.abs().max())
        row["pcm_steps"] = errors["phaseconv"] / row["peak"] / PCM_STEP
    return row


def worker(threads: int, runs: int, only: str, out: Path, litert: bool, memory: bool) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded
    rows = []
    for case in (c for c in CASES if only.lower() in c.name.lower()):
        rows.append(measure(case, threads, runs, lambda: print("round", flush=True), litert, memory))
        print("model", flush=True)
        out.write_text(json.dumps(rows))


def run_workers(threads: list[int], runs: int, only: str, litert: bool, memory: bool) -> list[dict]:
    cases = [c for c in CASES if only.lower() in c.name.lower()]
    rows = []
    with Progress(console=console) as progress:
        task = progress.add_task("models", total=len(cases) * len(threads) * runs)
        for count in threads:
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "rows.json"
                command = [sys.executable, __file__, "--worker", "--threads", str(count), "--runs", str(runs)]
                command += ["--only", only, "--json", str(out), "--litert" if litert else "--no-litert"]
                command.append("--memory" if memory else "--no-memory")
                process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                done = 0
                for line in process.stdout:
                    if line.strip() == "round":
                        progress.advance(task)
                    elif line.strip() == "model":
                        done += 1
                        progress.update(task, description=f"{count} thread(s): {done}/{len(cases)} models")
                stderr = process.stderr.read()
                if process.wait() != 0:
                    console.print(stderr[-3000:])
                    raise typer.Exit(1)
                rows += json.loads(out.read_text())
    return rows


COLUMNS = ["model", "threads", "stock ms", "phaseconv ms", "speedup", "eager ms", "vs eager", "partitions"]
COLUMNS += ["outside (stock -> phaseconv)", "max abs error", "PCM steps (full scale)", "RTF"]
COLUMNS += ["ORT ms (stock / phaseconv export)", "vs ORT", "LiteRT ms (stock / phaseconv export)", "vs LiteRT"]


def cells(row: dict) -> list[str]:
    """One model at one thread count, as the table shows it."""
    ms, delegation, baseline = row["ms"], row["delegation"], row["baseline"]
    outside = [sum(delegation[n]["outside"].values()) for n in (baseline, "phaseconv")]
    return [
        row["model"],
        str(row["threads"]),
        f"{ms[baseline]:.1f}{LABELS[baseline]}",
        f"{ms['phaseconv']:.1f}",
        f"{row['speedup']:.2f}x",
        f"{ms['eager PyTorch']:.1f}",
        f"{row['vs_eager']:.2f}x",
        f"{delegation[baseline]['partitions']} -> {delegation['phaseconv']['partitions']}",
        f"{outside[0]} -> {outside[1]}",
        f"{row['max_abs_error']['phaseconv']:.1e}",
        f"{row['pcm_steps']:.2f}" if "pcm_steps" in row else "-",
        f"{row['real_time_factor']:.3f}" if "real_time_factor" in row else "-",
        f"{ms[ORT_STOCK]:.1f} / {ms[ORT_PHASECONV]:.1f}",
        f"{row['vs_ort']:.2f}x",
        f"{ms[LITERT_STOCK]:.1f} / {ms[LITERT_PHASECONV]:.1f}" if LITERT_STOCK in ms else "-",
        f"{row['vs_litert']:.2f}x" if "vs_litert" in row else "-",
    ]


def table(rows: list[dict]) -> Table:
    result = Table(title="stock ExecuTorch 1.5.1 (XNNPACK) vs phaseconv, interleaved medians")
    for column in COLUMNS:
        result.add_column(column, justify="left" if column in ("model", COLUMNS[8]) else "right")
    for row in rows:
        result.add_row(*cells(row))
    return result


def markdown(rows: list[dict]) -> str:
    """These rows as a Markdown table, the console table's columns (the docs' tables: python -m benchmarks.report)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(cells(row)) + " |" for row in rows])


def plot(rows: list[dict], path: Path) -> None:
    """Speedup over stock per model, one bar per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(row["model"] for row in rows))
    threads = sorted({row["threads"] for row in rows})
    figure, axes = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(threads)
    for index, count in enumerate(threads):
        speedups = {row["model"]: row["speedup"] for row in rows if row["threads"] == count}
        positions = [m + (index - (len(threads) - 1) / 2) * width for m in range(len(models))]
        bars = axes.bar(positions, [speedups.get(m, 0) for m in models], width, label=f"{count} thread(s)")
        axes.bar_label(bars, fmt="%.2fx", fontsize=7)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    labels = [m.replace(", ", ",\n", 1) for m in models]
    axes.set_xticks(range(len(models)), labels, fontsize=7, rotation=30, ha="right")
    axes.set_ylabel("speedup over stock ExecuTorch (log)")
    axes.set_title("phaseconv vs stock ExecuTorch 1.5.1 XNNPACK, interleaved medians")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(
    threads: str = typer.Option("1,2", help="thread counts, comma-separated"),
    runs: int = typer.Option(10, help="timed rounds per model (median reported)"),
    only: str = typer.Option("", help="run only models whose name contains this"),
    json_path: Path = typer.Option(Path("results/models.json"), "--json", help="where to write the results"),
    plot_path: Path = typer.Option(Path("results/models.png"), "--plot", help="where to draw the chart"),
    as_markdown: bool = typer.Option(False, "--markdown", help="print the saved results as a Markdown table"),
    litert: bool = typer.Option(True, help="LiteRT's stock conversion and export_litert too (pip install '.[litert]')"),
    memory: bool = typer.Option(False, help="resident memory of each program loaded alone, at one thread (slower)"),
    is_worker: bool = typer.Option(False, "--worker", hidden=True),
    memory_of: Path | None = typer.Option(None, "--memory-of", hidden=True),
    weight_cache: bool = typer.Option(True, hidden=True),
) -> None:
    if memory_of is not None:  # a fresh process that loads one program (resident_growth)
        memory_worker(memory_of, json_path, weight_cache)
        return
    if is_worker:
        worker(int(threads), runs, only, json_path, litert, memory)
        return
    if as_markdown:
        print(markdown(json.loads(json_path.read_text())["models"]))
        return
    rows = run_workers([int(t) for t in threads.split(",")], runs, only, litert, memory)
    console.print(table(rows))
    console.print(
        "stock baseline when the model as built does not export or lower: (w) conv settings made static, "
        "weight_norm kept; "
        "(p) phaseconv.prepare(model); (f) prepared + constants folded (the stock lowering fails); "
        "(t) the network up to the spectrum, torch.istft in eager PyTorch (no stock runtime runs the iSTFT head)"
    )
    json_path.parent.mkdir(parents=True, exist_ok=True)
    if (only or threads != "1,2") and json_path.exists():  # a partial run updates its rows in the results
        fresh = {(row["model"], row["threads"]) for row in rows}
        kept = [r for r in saved_rows(json_path, "models") if (r["model"], r["threads"]) not in fresh]
        rows = sorted(kept + rows, key=lambda r: (r["threads"], [c.name for c in CASES].index(r["model"])))
    meta = {"runs": runs, "target": host_target(), "threads": threads, **machine(), **run_record()}
    json_path.write_text(json.dumps({"meta": meta, "models": rows}, indent=2))
    plot(rows, plot_path)
    console.print(f"wrote {json_path} and {plot_path}")


if __name__ == "__main__":
    typer.run(main)
