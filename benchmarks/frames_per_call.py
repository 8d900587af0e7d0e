"""The decoder step over several frames a call: what a frame costs when the latents queued are decoded
at once (pocket-tts's decoder thread does; the text-to-speech program has decode_2 and decode_4).

    python benchmarks/frames_per_call.py [--configs english_2026-09,english_18m_2026-10] [--runs 40]
                                         [--json results/frames_per_call.json]

Per config, in one worker process at one thread: pocket-tts's Mimi decoder as a step program over 1,
2 and 4 frames a call, fp32 and int8 (its output block fp32: the text-to-speech program's int8
decoder), lowered for this CPU (`--target host`); the programs run one call each in turn, a call of
N frames fed N random latents. Reported: milliseconds per frame (a call's median over its frames),
against one frame a call, and the rate at which the step's convolutions, linears and matrix products
get through their multiply-adds, against XNNPACK's own float32 GEMM at its best on this machine
(benchmarks/operators.py's ceiling).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import frames_per_call as frames_table  # noqa: E402
from benchmarks.workers import save_results, worker_rows  # noqa: E402

console = Console(width=200)
DEFAULT_CONFIGS = "english_2026-09,english_18m_2026-10"
FRAMES = (1, 2, 4)


def worker(config: str, runs: int, out: Path) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(1)  # before any program is loaded
    import torch

    from benchmarks.operators import gemm_rate
    from benchmarks.streaming import calibration_frames, multiply_adds
    from phaseconv.lowering import lower
    from phaseconv.models.pocket_tts import MimiStep, build_mimi
    from phaseconv.quantize import quantize
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    mimi = build_mimi(config)
    calibration = torch.cat([latent for (latent,) in calibration_frames(32)], dim=1)
    programs, macs, generator = {}, {}, torch.Generator().manual_seed(0)
    for frames in FRAMES:
        step = MimiStep(mimi, frames=frames)
        with torch.no_grad():
            ep = torch.export.export(step, (torch.zeros(1, frames, step.latent_dim),))
        macs[frames] = multiply_adds(ep)
        sets = [(calibration[:, i : i + frames],) for i in range(0, calibration.shape[1] - frames + 1, frames)]
        int8 = quantize(ep, sets, keep_float=[step.output_block()])
        for precision, program in (("fp32", ep), ("int8, output block fp32", int8)):
            latents = torch.randn(1, frames, step.latent_dim, generator=generator)
            loaded = LoadedProgram(lower(program, target="host").buffer)
            programs[(precision, frames)] = (loaded, latents)
    runners = {key: (lambda p=p, x=x: p.run((x,))) for key, (p, x) in programs.items()}
    times = interleaved_times(runners, runs)
    best = gemm_rate(runs)
    rows = []
    for (precision, frames), samples in times.items():
        call_ms = median_ms(samples)
        rows.append(
            {
                "config": config,
                "precision": precision,
                "frames_per_call": frames,
                "ms_per_frame": call_ms / frames,
                "gmac_s": macs[frames] / call_ms / 1e6,
                "gemm_best_gmac_s": best,
            }
        )
    out.write_text(json.dumps(rows))


def main(
    configs: str = typer.Option(DEFAULT_CONFIGS, help="pocket-tts configs, comma-separated"),
    runs: int = typer.Option(40, min=1, help="calls of each program, interleaved"),
    json_path: Path = typer.Option(Path("results/frames_per_call.json"), "--json"),
    is_worker: bool = typer.Option(False, "--worker", hidden=True),
) -> None:
    if is_worker:
        worker(configs, runs, json_path)
        return
    rows = []
    for config in configs.split(","):
        rows += worker_rows(__file__, ["--configs", config, "--runs", str(runs)], f"{config}: timing", console)
    from phaseconv.targets import host_target

    save_results(json_path, rows, partial_key="config", runs=runs, threads=1, target=host_target())
    print(frames_table(json.loads(json_path.read_text())))
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
