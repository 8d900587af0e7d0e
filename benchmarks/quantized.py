"""int8: stock ExecuTorch's int8 program against phaseconv's, both flows, and fp32, at 1 and 2 threads.

    python benchmarks/quantized.py [--threads 1,2] [--runs 10] [--only NAME] [--json results/quantized.json]
                                   [--litert]

Per case (single layers, then whole models): quantize with ExecuTorch's XNNPACKQuantizer (static,
per-channel int8 weights), calibrated on the example inputs and three random sets like them, via
`phaseconv.quantize`; lower
- "stock int8": the quantized program as it is;
- "phaseconv int8": what `phaseconv lower --quantize int8` writes: the quantized program rewritten
  (quantize, then rewrite), or, with a grouped transposed convolution, rewrite then quantize;
- "phaseconv int8, rewritten first": the rewritten float program, quantized (rewrite, then quantize);
- "stock int8-dynamic" / "phaseconv int8-dynamic": dynamically quantized activations;
- "stock fp32" / "phaseconv fp32": no quantization.
With --litert, LiteRT's programs too, in its interpreter with as many threads, calibrated on the same
inputs: "LiteRT fp32" (the stock conversion), "LiteRT int8" (litert-torch's static int8 quantizer on
the program as it is) and "LiteRT int8, phaseconv export" (`export_litert(ep, calibration=...)`:
rewritten, then quantized). litert-torch gives an int8 model int8 inputs and outputs: LiteRT is timed
on its input converted once and its output as it comes (a caller's float <-> int8 conversion is not
counted; ExecuTorch's int8 programs convert inside, in XNNPACK).
Every program runs through its runtime on the example inputs; the SNR of its output against the fp32
model in eager is reported next to its median time (all programs interleaved). A program that does
not lower or load is reported with its error. One worker process per thread count.
"""

from __future__ import annotations

import json
import math
import sys
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workers import save_results, worker_rows  # noqa: E402

console = Console(width=220)
PROGRAMS = (
    "stock fp32",
    "phaseconv fp32",
    "stock int8",
    "phaseconv int8",
    "phaseconv int8, rewritten first",
    "stock int8-dynamic",
    "phaseconv int8-dynamic",
)
COMMAND = "python benchmarks/quantized.py"
LITERT_PROGRAMS = ("LiteRT fp32", "LiteRT int8", "LiteRT int8, phaseconv export")


def cases() -> list[tuple[str, object]]:
    """(name, build) with build() -> (module, inputs)."""
    from benchmarks.layers import deconv_case, depthwise_case
    from phaseconv.models import image, stylegan, transformers_audio, unet

    def layer(case):
        return lambda: (case.module, case.inputs)

    layers = [
        deconv_case(f"1d {c}->{c // 2} k{2 * s} s{s} T=25", 1, c, c // 2, 2 * s, s, s // 2, (25,))
        for c, s in ((512, 8), (256, 6), (128, 5), (64, 4))
    ]
    layers.append(deconv_case("2d 128->64 k4 s2 p1 64x64", 2, 128, 64, 4, 2, 1, (64, 64)))
    layers.append(deconv_case("2d 256->128 k4 s2 p1 32x32", 2, 256, 128, 4, 2, 1, (32, 32)))
    layers.append(depthwise_case("1d depthwise 512 k4 s2 T=25 (Mimi)", 1, 512, 4, 2, 1, (25,)))
    return [(case.name, layer(case)) for case in layers] + [
        ("2d conv 128->128 k3 64x64", plain_convolution),
        ("U-Net 128x128, ConvTranspose2d(k2, s2)", unet.unet),
        ("MI-GAN-like 128x128", image.migan_generator),
        ("StyleGAN2-like 128x128", stylegan.stylegan2_generator),
        ("HiFi-GAN V1, 100 frames", default_init(partial(transformers_audio.hifigan, 100, "v1"))),
        ("Mimi decoder, 25 frames (2 s)", partial(transformers_audio.mimi_latents_decoder, 25)),
    ]


def plain_convolution():
    """A 3x3 convolution and ReLU, no transposed one: the int8 convolution kernels' own rate."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(128, 128, 3, padding=1), torch.nn.ReLU()).eval()
    return module, (torch.randn(1, 128, 64, 64),)


def default_init(build):
    """The model with PyTorch's default init for its convolutions instead of transformers' normal(0, 0.01)
    for HiFi-GAN: random HiFi-GAN weights from that give a waveform of about 1e-5, below one int8 step of
    any scale the quantizer picks, so every int8 program outputs silence (SNR 0 dB); with the default
    init the waveform is O(1), as a trained vocoder's is."""

    def built():
        import torch

        module, inputs = build()
        torch.manual_seed(0)
        for layer in module.modules():
            if isinstance(layer, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
                layer.reset_parameters()
        return module, inputs

    return built


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:160] if lines else ''}"


def programs_of(module, inputs) -> tuple[dict, dict]:
    """Every program of one case (exported ExportedPrograms, to lower), and why any could not be built."""
    import torch

    import phaseconv
    from phaseconv.quantize import quantize

    generator = torch.Generator().manual_seed(1)
    calibration = [inputs] + [
        tuple(torch.randn(t.shape, generator=generator, dtype=t.dtype) for t in inputs) for _ in range(3)
    ]
    prepared = phaseconv.prepare(module)
    with torch.no_grad():
        fp32 = torch.export.export(prepared, inputs)
    built = {"stock fp32": (fp32, False), "phaseconv fp32": (fp32, True)}
    failures = {}
    recipes = {
        "stock int8": ("static", False, False),
        "phaseconv int8": ("static", None, True),  # what `phaseconv lower --quantize int8` does
        "phaseconv int8, rewritten first": ("static", True, True),
        "stock int8-dynamic": ("dynamic", False, False),
        "phaseconv int8-dynamic": ("dynamic", False, True),
    }
    quantized = {}
    for name, (mode, first, rewrite) in recipes.items():
        try:
            if (mode, first) not in quantized:
                quantized[mode, first] = quantize(fp32, calibration, mode=mode, rewrite_first=first)
            built[name] = (quantized[mode, first], rewrite)
        except Exception as error:
            failures[name] = f"quantize: {_first_line(error)}"
    return built, failures, calibration


def litert_sessions(program, calibration, threads: int) -> tuple[dict, dict]:
    """LiteRT's programs of one case (LITERT_PROGRAMS) in its interpreter, and why any failed."""
    import phaseconv
    from phaseconv.runtimes.litert import LiteRTSession, to_tflite

    converters = {
        "LiteRT fp32": lambda: to_tflite(program),
        "LiteRT int8": lambda: to_tflite(program, calibration=calibration),
        "LiteRT int8, phaseconv export": lambda: phaseconv.export_litert(program, calibration=calibration)[0],
    }
    sessions, failures = {}, {}
    for name, convert in converters.items():
        try:
            sessions[name] = LiteRTSession(convert(), threads)
        except Exception as error:
            failures[name] = _first_line(error)
    return sessions, failures


def measure(name: str, build, threads: int, runs: int, litert: bool = False) -> dict:
    import torch

    import phaseconv
    from phaseconv.quantize import snr_db
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    module, inputs = build()
    with torch.no_grad():
        expected = module(*inputs)
    built, failures, calibration = programs_of(module, inputs)
    loaded, summaries, snr, decisions = {}, {}, {}, {}
    for program_name, (program, rewrite) in built.items():
        try:
            lowered = phaseconv.lower(program, rewrite=rewrite, target="host")
            # no weight cache: int8 programs with the same weights and other scales would share packed
            # data in it, requantization scales included (docs/int8.md)
            loaded[program_name] = LoadedProgram(lowered.buffer, weight_cache=False)
            (output,) = loaded[program_name].run(inputs)
        except Exception as error:
            failures[program_name] = _first_line(error)
            loaded.pop(program_name, None)
            continue
        summaries[program_name] = lowered.summary.to_dict()
        snr[program_name] = snr_db(expected, output)
        decisions[program_name] = [d.to_dict() for d in lowered.decisions if d.rule == "conv_transpose"]
    runners = {n: partial(p.run, inputs) for n, p in loaded.items()}
    if litert:
        sessions, litert_failures = litert_sessions(built["stock fp32"][0], calibration, threads)
        failures.update(litert_failures)
        for program_name, session in sessions.items():
            snr[program_name] = snr_db(expected, session.run(inputs)[0])
            runners[program_name] = session.timed_call(inputs)  # its int8 input made once, as a caller would
    torch.set_num_threads(threads)
    times = interleaved_times(runners, runs, 2, lambda: print("round", flush=True))
    return {
        "case": name,
        "threads": threads,
        "runs": runs,
        "ms": {n: median_ms(t) for n, t in times.items()},
        "snr_db": snr,
        "failures": failures,
        "delegation": summaries,
        "conv_transpose": decisions,
    }


def worker(threads: int, runs: int, only: str, out: Path, litert: bool) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded
    rows = []
    for name, build in cases():
        if only.lower() in name.lower():
            rows.append(measure(name, build, threads, runs, litert))
            out.write_text(json.dumps(rows))


def run_workers(threads: list[int], runs: int, only: str, litert: bool) -> list[dict]:
    status = "{} thread(s): quantizing, lowering and timing every case"
    arguments = ["--runs", str(runs), "--only", only, "--litert" if litert else "--no-litert"]
    return [
        row
        for count in threads
        for row in worker_rows(__file__, ["--threads", str(count), *arguments], status.format(count), console)
    ]


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def table(rows: list[dict]) -> Table:
    result = Table(title="int8 on ExecuTorch 1.5.1 XNNPACK: median ms (SNR dB against fp32 eager), interleaved")
    result.add_column("case")
    result.add_column("threads", justify="right")
    programs = PROGRAMS + tuple(n for n in LITERT_PROGRAMS if any(n in r["ms"] or n in r["failures"] for r in rows))
    for name in programs:
        result.add_column(name.replace("phaseconv", "pc"), justify="right")
    for column in ("pc int8 vs stock int8", "pc int8 vs pc fp32", "partitions (pc int8)"):
        result.add_column(column, justify="right")
    for row in rows:
        ms, snr = row["ms"], row["snr_db"]
        cells = [
            f"{ms[n]:.2f} ({snr[n]:.0f})" if n in ms else "fails" if n in row["failures"] else "-" for n in programs
        ]
        parts = row["delegation"].get("phaseconv int8", {}).get("partitions", "-")
        result.add_row(
            row["case"],
            str(row["threads"]),
            *cells,
            _ratio(ms.get("stock int8"), ms.get("phaseconv int8")),
            _ratio(ms.get("phaseconv fp32"), ms.get("phaseconv int8")),
            str(parts),
        )
    return result


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(
    threads: str = typer.Option("1,2", help="thread counts, comma-separated"),
    runs: int = typer.Option(10, help="timed rounds per case (median reported)"),
    only: str = typer.Option("", help="run only cases whose name contains this"),
    json_path: Path = typer.Option(Path("results/quantized.json"), "--json", help="where to write the results"),
    litert: bool = typer.Option(False, help="LiteRT's fp32 and int8 programs too (pip install '.[litert]')"),
    is_worker: bool = typer.Option(False, "--worker", hidden=True),
) -> None:
    if is_worker:
        worker(int(threads), runs, only, json_path, litert)
        return
    rows = run_workers([int(t) for t in threads.split(",")], runs, only, litert)
    console.print(table(rows))
    for count in sorted({r["threads"] for r in rows}):
        layers = [
            r["ms"]["stock int8"] / r["ms"]["phaseconv int8"]
            for r in rows
            if r["threads"] == count
            and r["case"][:2] in ("1d", "2d")
            and {"stock int8", "phaseconv int8"} <= r["ms"].keys()
        ]
        if layers:
            console.print(
                f"{count} thread(s): transposed-convolution layers, phaseconv int8 vs stock int8: geometric mean "
                f"{geometric_mean(layers):.2f}x, lowest {min(layers):.2f}x"
            )
    command = COMMAND + (" --litert" if litert else "")
    from phaseconv.targets import host_target

    save_results(
        json_path,
        rows,
        partial_key="case" if only else None,
        runs=runs,
        command=command,
        target=host_target(),
        threads=threads,
    )
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
