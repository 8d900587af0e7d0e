"""Streaming decode, frame by frame: pocket-tts's Mimi decoder as a step program, stock and phaseconv,
against pocket-tts's own eager streaming decode, at 1 and 2 threads.

    python benchmarks/streaming.py [--config english_2026-09] [--threads 1,2] [--frames 120]
                                   [--json results/streaming.json]

Per thread count (one worker process each: XNNPACK's pool is sized before any load): export the step,
lower it with stock ExecuTorch and after phaseconv.rewrite, load both, and decode the same random
latents with the two programs and pocket-tts's eager decode, one frame of each in turn. Reported per
program: time to first audio (the first frame's call on a fresh load), median and p95 per frame over
the frames after it, and the error against pocket-tts's audio in 16-bit PCM steps (waveform scaled
to peak 1). Each step program also decodes the frames again by itself ("alone": nothing evicts its
weights from the cache between frames, as a TTS runner's language model would). Then the phaseconv
step once more with ExecuTorch's ETDump: milliseconds per frame by
XNNPACK operator, and the rate at which its GEMMs (fully connected layers, convolutions) get through
the step's weights. The int8 step is `phaseconv.quantize` (XNNPACKQuantizer, static, calibrated on
40 frames of other random latents), once whole and once with the decoder's last residual block kept
fp32 (`keep_float`; benchmarks/int8_sensitivity.py says why that block); their SNR is against the
fp32 phaseconv step's audio. Beside them,
the step on ONNX Runtime (its stock export and `phaseconv.export_onnx`'s) and on LiteRT (its stock
conversion and `phaseconv.export_litert`'s), each call fed the state the call before returned.
Before each timed call the process's other threads are let go idle (runtimes/timing.py), so no
program pays for another runtime's spinning threads.
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workers import save_results, worker_rows  # noqa: E402

console = Console(width=200)
PROGRAMS = ("stock step", "phaseconv step", "phaseconv int8 step", "phaseconv int8 step, output block fp32")
PROGRAMS += ("pocket-tts eager",)
# the peers, each call fed the state the one before returned: ONNX Runtime and LiteRT, stock and phaseconv's export
PROGRAMS += ("ORT stock step", "ORT export_onnx step", "LiteRT stock step", "LiteRT export_litert step")
CALIBRATION_FRAMES = 40


def calibration_frames(latent_dim: int) -> list[tuple]:
    """The int8 steps' calibration: CALIBRATION_FRAMES random latents (not the decoded ones), one per call, in order."""
    import torch

    latents = torch.randn(1, CALIBRATION_FRAMES, latent_dim, generator=torch.Generator().manual_seed(1))
    return [(latents[:, i : i + 1],) for i in range(CALIBRATION_FRAMES)]


def peer_steps(ep, threads: int, latents) -> dict:
    """The step through ONNX Runtime and LiteRT, each as converted and by phaseconv's export: per
    frame, a call fed the state the call before returned (graph/state.py: explicit_state)."""
    from phaseconv.litert_export import export_litert
    from phaseconv.onnx_export import export_onnx
    from phaseconv.runtimes.litert import LiteRTSession, to_tflite
    from phaseconv.runtimes.onnxruntime import OrtSession, to_onnx

    def frame_by_frame(session):
        state = ()

        def call(i):
            nonlocal state
            out, *rest = session.run((latents[:, i : i + 1],), state)
            state = tuple(rest)
            return out

        return call

    sessions = {
        "ORT stock step": OrtSession(to_onnx(ep), threads),
        "ORT export_onnx step": OrtSession(export_onnx(ep)[0], threads),
        "LiteRT stock step": LiteRTSession(to_tflite(ep), threads),
        "LiteRT export_litert step": LiteRTSession(export_litert(ep)[0], threads),
    }
    return {name: frame_by_frame(session) for name, session in sessions.items()}


def worker(config: str, threads: int, frames: int, out: Path) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded
    import torch

    import phaseconv
    from phaseconv.models.pocket_tts import MimiStep, build_mimi, peak_scaled_pcm_error, stream_eager
    from phaseconv.quantize import snr_db
    from phaseconv.runtimes.etdump import kind_times
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.timing import wait_until_others_idle

    torch.set_num_threads(threads)
    mimi = build_mimi(config)
    step = MimiStep(mimi)
    latents = torch.randn(1, frames, step.latent_dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ep = torch.export.export(step, (latents[:, :1],))
    lowered = {"stock step": phaseconv.lower(ep, rewrite=False), "phaseconv step": phaseconv.lower(ep, target="host")}
    calibration = calibration_frames(step.latent_dim)
    quantized = phaseconv.quantize(ep, calibration)
    lowered["phaseconv int8 step"] = phaseconv.lower(quantized, target="host")
    partly = phaseconv.quantize(ep, calibration, keep_float=[step.output_block()])
    lowered["phaseconv int8 step, output block fp32"] = phaseconv.lower(partly, target="host")
    stock_int8 = stock_int8_failure(ep, calibration)
    loaded = {name: LoadedProgram(program.buffer, weight_cache=own_cache(name)) for name, program in lowered.items()}
    eager = stream_eager(copy.deepcopy(mimi), latents)
    calls = {name: (lambda i, p=program: p.run((latents[:, i : i + 1],))[0]) for name, program in loaded.items()}
    calls["pocket-tts eager"] = lambda i: next(eager)
    calls |= peer_steps(ep, threads, latents)
    times = {name: [] for name in PROGRAMS}
    audio = {name: [] for name in PROGRAMS}
    for i in range(frames):
        for name in PROGRAMS:
            wait_until_others_idle()  # no program pays for threads another one left spinning
            start = time.perf_counter()
            audio[name].append(calls[name](i))
            times[name].append((time.perf_counter() - start) * 1e3)
        print("frame", flush=True)
    reference = torch.cat(audio["pocket-tts eager"], dim=-1)
    fp32 = torch.cat(audio["phaseconv step"], dim=-1)
    alone = {name: alone_median_ms(program.buffer, latents, own_cache(name)) for name, program in lowered.items()}
    profiled = {"phaseconv step": ep, "phaseconv int8 step": quantized}
    macs = multiply_adds(ep)  # the int8 step does the same
    rows = []
    for name in PROGRAMS:
        summary = lowered[name].summary if name in lowered else None
        rows.append(
            {
                "config": config,
                "threads": threads,
                "program": name,
                "first_audio_ms": times[name][0],
                "median_ms": statistics.median(times[name][1:]),
                "p95_ms": float(np.percentile(times[name][1:], 95)),
                "pcm_steps": peak_scaled_pcm_error(torch.cat(audio[name], dim=-1), reference),
                "partitions": summary.partitions if summary else None,
                "outside": dict(summary.outside) if summary else None,
                "alone_median_ms": alone.get(name),
                "snr_db_vs_fp32_step": snr_db(fp32, torch.cat(audio[name], dim=-1)),
                "stock_int8": stock_int8,
            }
        )
    for name, program in profiled.items():
        operators = kind_times(lowered[name].buffer, (latents[:, :1],))
        rows[PROGRAMS.index(name)].update(operator_ms=operators, weight_bytes=weight_bytes(program), multiply_adds=macs)
    out.write_text(json.dumps(rows))


def stock_int8_failure(ep, calibration) -> str:
    """Why stock ExecuTorch cannot run the step quantized with its own quantizer, or "runs"."""
    import phaseconv
    from phaseconv.runtimes.executorch import LoadedProgram

    try:
        lowered = phaseconv.lower(phaseconv.quantize(ep, calibration, rewrite_first=False), rewrite=False)
        LoadedProgram(lowered.buffer).run(calibration[0])
    except Exception as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0][:160]}"
    return "runs"


def own_cache(name: str) -> bool:
    """Whether a program may use XNNPACK's weight cache here: not an int8 one. ExecuTorch 1.5.1 keys a
    packed weight by the names of its weight and bias data alone, and an int8 convolution's packed data
    holds its requantization scales: a second int8 program with the same weights and other activation
    scales (the step with a block kept fp32) would run with the first one's (measured: 28.6 dB instead
    of 36.4 against the fp32 step)."""
    return "int8" not in name


def alone_median_ms(buffer: bytes, latents, weight_cache: bool) -> float:
    """Median ms per frame of a freshly loaded program decoding every frame with nothing in between:
    its weights may then stay in the cache, which a TTS runner's language model would evict."""
    from phaseconv.runtimes.executorch import LoadedProgram

    program = LoadedProgram(buffer, weight_cache=weight_cache)
    times = []
    for i in range(latents.shape[1]):
        start = time.perf_counter()
        program.run((latents[:, i : i + 1],))
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[1:])


def weight_bytes(ep) -> int:
    """Bytes of the parameters and buffers (the state included) that the program reads each call;
    the encoder's, which it does not read, are left out."""
    specs = {spec.arg.name: spec for spec in ep.graph_signature.input_specs}
    total = 0
    for node in ep.graph.nodes:
        spec = specs.get(node.name) if node.op == "placeholder" else None
        value = ep.state_dict.get(spec.target, ep.constants.get(spec.target)) if spec is not None else None
        if value is None or not node.users:
            continue
        total += value.numel() * value.element_size()
    return total


def multiply_adds(ep) -> int:
    """Multiply-adds of one call of `ep` as phaseconv rewrites it for this CPU: its convolutions'
    and linear layers' (as benchmarks/operators.py counts them) and its matrix products' (outputs
    times the inner size): the work XNNPACK's GEMM operators do."""
    from benchmarks.operators import conv_shape, gemm_nodes
    from phaseconv.rewrite import rewrite
    from phaseconv.rules import TARGET_RULES
    from phaseconv.targets import host_target

    program = rewrite(ep, TARGET_RULES[host_target()])
    products = [n for n in program.graph.nodes if str(n.target) in ("aten.bmm.default", "aten.matmul.default")]
    layers = sum(conv_shape(node)["macs"] for node in gemm_nodes(program))
    return layers + sum(n.meta["val"].numel() * n.args[0].meta["val"].shape[-1] for n in products)


def run_workers(config: str, threads: list[int], frames: int) -> list[dict]:
    rows = []
    for count in threads:
        arguments = ["--config", config, "--threads", str(count), "--frames", str(frames)]
        status = f"{config}, {count} thread(s): lowering, then {frames} frames of each program"
        rows += worker_rows(__file__, arguments, status, console)
    return rows


def table(rows: list[dict], frames: int) -> Table:
    title = f"pocket-tts Mimi decoder, one 80 ms frame per call, {frames} frames, interleaved"
    result = Table(title=title)
    columns = ("config", "threads", "program", "first audio ms", "median ms", "p95 ms", "vs stock", "vs eager")
    columns += ("alone ms",)  # the program by itself, frame after frame (weights may stay cached)
    for column in (*columns, "PCM steps", "SNR vs fp32 step", "partitions", "outside"):
        result.add_column(column)
    for row in rows:
        peers = {
            r["program"]: r["median_ms"] for r in rows if (r["config"], r["threads"]) == (row["config"], row["threads"])
        }
        result.add_row(
            row["config"],
            str(row["threads"]),
            row["program"],
            f"{row['first_audio_ms']:.2f}",
            f"{row['median_ms']:.2f}",
            f"{row['p95_ms']:.2f}",
            f"{peers['stock step'] / row['median_ms']:.2f}x",
            f"{peers['pocket-tts eager'] / row['median_ms']:.2f}x",
            "-" if row["alone_median_ms"] is None else f"{row['alone_median_ms']:.2f}",
            f"{row['pcm_steps']:.3f}",
            f"{row['snr_db_vs_fp32_step']:.1f} dB",
            "-" if row["partitions"] is None else str(row["partitions"]),
            "-" if row["outside"] is None else ", ".join(f"{k} x{v}" for k, v in sorted(row["outside"].items())),
        )
    return result


def profile_table(rows: list[dict]) -> Table:
    """Where the phaseconv step's time goes, by XNNPACK operator (ExecuTorch's ETDump)."""
    result = Table(title="phaseconv steps, ms per frame by operator (ETDump, median over 20 calls)")
    result.add_column("operator")
    profiled = [r for r in rows if "operator_ms" in r]
    for row in profiled:
        result.add_column(f"{row['program']}, {row['threads']} thread(s)", justify="right")
    totals = {k: sum(r["operator_ms"].get(k, 0) for r in profiled) for r in profiled for k in r["operator_ms"]}
    for kind in sorted(totals, key=lambda k: -totals[k])[:14]:
        result.add_row(kind, *(f"{r['operator_ms'].get(kind, 0):.3f}" for r in profiled))
    result.add_row("all operators", *(f"{sum(r['operator_ms'].values()):.3f}" for r in profiled))
    gemm = [sum(v for k, v in r["operator_ms"].items() if "GEMM" in k) for r in profiled]
    result.add_row(
        "weights and state read per frame / GEMM time",
        *(
            f"{r['weight_bytes'] / 1e6:.1f} MB, {r['weight_bytes'] / ms / 1e6:.1f} GB/s"
            for r, ms in zip(profiled, gemm)
        ),
    )
    result.add_row(
        "multiply-adds per frame / GEMM time",
        *(
            f"{r['multiply_adds'] / 1e6:.0f} M, {r['multiply_adds'] / ms / 1e6:.0f} GMAC/s"
            for r, ms in zip(profiled, gemm)
        ),
    )
    return result


def main(
    config: str = typer.Option("english_2026-09", help="a config shipped with pocket-tts"),
    threads: str = typer.Option("1,2", help="thread counts, comma-separated"),
    frames: int = typer.Option(120, min=2, help="frames decoded by each program (80 ms each)"),
    json_path: Path = typer.Option(Path("results/streaming.json"), "--json", help="where to write the results"),
    is_worker: bool = typer.Option(False, "--worker", hidden=True),
) -> None:
    if is_worker:
        worker(config, int(threads), frames, json_path)
        return
    rows = run_workers(config, [int(t) for t in threads.split(",")], frames)
    console.print(table(rows, frames))
    console.print(profile_table(rows))
    console.print(f"stock ExecuTorch with its own quantizer (static int8): {rows[0]['stock_int8']}")
    from phaseconv.targets import host_target

    save_results(json_path, rows, frames=frames, target=host_target(), threads=threads)
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
