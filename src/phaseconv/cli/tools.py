"""The commands that measure and list: bench, demo, models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress
from rich.table import Table

from phaseconv.cli.app import app, console, print_json, quiet
from phaseconv.cli.convert import load_source, say_prepared
from phaseconv.cli.options import Model, NoPrepare, Target, Threads, Verbose, integers
from phaseconv.cli.output import line, show_decisions, show_summaries
from phaseconv.errors import parked_stderr
from phaseconv.files import require_folder, write_atomically
from phaseconv.targets import resolve_target


@app.command()
def bench(
    model: Model,
    threads: Annotated[str, typer.Option(help="comma-separated thread counts, e.g. 1,2")] = "1",
    runs: Annotated[int, typer.Option(min=1, help="timed runs of each program per thread count")] = 20,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the results as JSON")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="write a PNG bar chart")] = None,
    no_prepare: NoPrepare = False,
    lengths: Annotated[
        str | None,
        typer.Option(
            "--lengths", help="a program with a dynamic size: run it at these values of that size, e.g. 7,20,50"
        ),
    ] = None,
    target: Target = "host",
) -> None:
    """Time the stock and the rewritten program through the ExecuTorch runtime, interleaved."""
    from phaseconv.bench import bench as run_bench
    from phaseconv.bench import plot
    from phaseconv.models.loading import inputs_at_length

    counts = integers(threads, "--threads")
    resolve_target(target)
    for path in (json_path, plot_path):
        if path is not None:
            require_folder(path)
    sizes = integers(lengths, "--lengths") if lengths is not None else ()
    source = load_source(model, not no_prepare)  # fail here, with a clear message, not in a worker
    for size in sizes:
        inputs_at_length(source.program, source.inputs, size)
    say_prepared(model, source)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"timing {model}", total=runs * len(counts) * max(1, len(sizes)))
        options = {"prepare": not no_prepare, "lengths": sizes, "target": target}
        results = run_bench(model, counts, runs, on_round=lambda: progress.advance(task), **options)
    console.print(bench_table(f"{model}: ExecuTorch XNNPACK, median of {runs} interleaved runs", results, sizes))
    line("max |diff| is against eager PyTorch on the same inputs")
    if json_path is not None:
        write_atomically(json_path, json.dumps(results, indent=2).encode())
        line(f"wrote {json_path}")
    if plot_path is not None:
        import io

        buffer = io.BytesIO()
        plot(results, buffer)
        write_atomically(plot_path, buffer.getvalue())
        line(f"wrote {plot_path}")


def bench_table(title: str, results: list[dict], sizes) -> Table:
    table = Table(title=title)
    columns = ("threads", "length") if sizes else ("threads",)
    columns += ("stock ms", "phaseconv ms", "speedup", "max |diff| stock", "max |diff| phaseconv")
    for column in columns:
        table.add_column(column, justify="right")
    for r in results:
        stock, fast = r["programs"]["stock"], r["programs"]["phaseconv"]
        table.add_row(
            str(r["threads"]),
            *([str(r["length"])] if sizes else []),
            f"{stock['median_ms']:.3f}",
            f"{fast['median_ms']:.3f}",
            f"{r['speedup']:.2f}x",
            f"{stock['max_abs_error']:.2e}",
            f"{fast['max_abs_error']:.2e}",
        )
    return table


@app.command()
def models(as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of lines")] = False) -> None:
    """The built-in models, by the names MODEL takes."""
    from phaseconv.models import catalogue

    rows = catalogue()
    if as_json:
        return print_json([{"name": name, "description": text} for name, text in rows])
    for name, text in rows:
        line(f"{name}  {text}")


@app.command()
def demo(
    frames: Annotated[int, typer.Option(min=1, help="12.5 Hz latent frames (80 ms of audio each)")] = 12,
    runs: Annotated[int, typer.Option(min=1, help="timed runs per program")] = 20,
    threads: Threads = 1,
    verbose: Verbose = False,
) -> None:
    """Export a Mimi-like audio decoder, rewrite it, and compare stock and rewritten programs on XNNPACK.

    The decoder: depthwise k4 s2 frame upsampler, then SEANet (ELU + ConvTranspose1d(k = 2s) at strides
    8, 6, 5, 4 with residual units); random weights.
    """
    from phaseconv.runtimes.executorch import set_threads

    with parked_stderr(quiet()):  # the runtime's CPU probing
        set_threads(threads)
    import torch

    from phaseconv.compare import lower_stock_and_rewritten, time_variants
    from phaseconv.models.audio import mimi_decoder

    model, inputs = mimi_decoder(frames)
    console.print(f"[bold]Mimi-like decoder[/]: latents {list(inputs[0].shape)} -> {frames * 1920} audio samples")
    with torch.no_grad():
        ep = torch.export.export(model, inputs)
    with parked_stderr(quiet()):
        comparison = lower_stock_and_rewritten(ep, inputs)
    show_decisions(comparison.decisions, verbose)
    show_summaries({name: v.summary for name, v in comparison.variants.items()})
    with console.status(f"timing {runs} interleaved runs of each program at {threads} thread(s)"):
        time_variants(comparison, inputs, runs)
    table = Table(title=f"ExecuTorch XNNPACK, {threads} thread(s), median of {runs} interleaved runs")
    for column in ("program", "max |error| vs eager", "16-bit PCM steps", "ms"):
        table.add_column(column)
    for variant in comparison.variants.values():
        error = variant.max_abs_error
        table.add_row(variant.name, f"{error:.2e}", f"{error * 32768:.3f}", f"{variant.median_ms:.2f}")
    console.print(table)
    console.print(f"[bold green]speedup over stock XNNPACK: {comparison.speedup():.2f}x[/]")
