"""The `phaseconv` command."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from phaseconv.report import decisions_table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Fast, exact upsampling layers for ExecuTorch.")
console = Console()


@app.callback()
def _group() -> None:
    """phaseconv: rewrite transposed convolutions and nearest upsampling into fast, exact polyphase form."""


@app.command()
def demo(
    frames: int = typer.Option(25, help="latent frames (80 ms of audio each)"),
    runs: int = typer.Option(20, help="timed runs per program"),
    threads: int = typer.Option(1, help="XNNPACK threads"),
) -> None:
    """Export a Mimi-like audio decoder, rewrite it, and compare stock and rewritten programs on XNNPACK."""
    import torch

    from phaseconv.compare import lower_stock_and_rewritten, time_variants
    from phaseconv.models.audio import seanet_decoder
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)
    model, inputs = seanet_decoder(frames)
    console.print(f"[bold]Mimi-like SEANet decoder[/]: latents {list(inputs[0].shape)} -> audio")
    with torch.no_grad():
        ep = torch.export.export(model, inputs)
    comparison = lower_stock_and_rewritten(ep, inputs)
    console.print(decisions_table(comparison.decisions))
    with console.status(f"timing {runs} interleaved runs of each program at {threads} thread(s)"):
        time_variants(comparison, inputs, runs)
    table = Table(title=f"ExecuTorch XNNPACK, {threads} thread(s), median of {runs} interleaved runs")
    for column in ("program", "partitions", "ops outside delegate", "max |error| vs eager", "16-bit PCM steps", "ms"):
        table.add_column(column)
    for variant in comparison.variants.values():
        outside = ", ".join(f"{k} x{v}" for k, v in sorted(variant.summary.outside.items())) or "none"
        table.add_row(
            variant.name,
            str(variant.summary.partitions),
            outside,
            f"{variant.max_abs_error:.2e}",
            f"{variant.max_abs_error * 32768:.3f}",
            f"{variant.median_ms:.2f}",
        )
    console.print(table)
    console.print(f"[bold green]speedup over stock XNNPACK: {comparison.speedup():.2f}x[/]")


def main() -> None:
    app()
