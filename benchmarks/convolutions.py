"""The models' convolutions alone, on every runtime: what this machine's kernels reach.

    python benchmarks/convolutions.py [--runs 10] [--threads 1] [--only U-Net] [--program-input]
                                      [--json results/convolutions.json]

Each convolution of benchmarks/variants.py's MODEL_CONVOLUTIONS (the shapes that carry the models'
time) runs interleaved in one process as: stock ExecuTorch (XNNPACK's convolution), phaseconv
lowered for any CPU and for this host (on x86-64 without AVX-512: Winograd or im2col, i.e. GEMMs),
ONNX Runtime (its CPU provider on the torch.onnx export) and eager PyTorch. Multiply-adds per second
count the convolution's own multiply-adds, `C_out * C_in * taps` per output position, whatever the
program computes: a model whose convolutions run here at half ONNX Runtime's rate cannot beat it by
rewriting the graph around them. Each convolution reads a depthwise 1x1 convolution's output, as
in a network (its multiply-adds, `C_in` per position, are not counted); with --program-input it
reads the program's input, which arrives in NCHW (results/convolutions-program-input.json).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.variants import MODEL_CONVOLUTIONS, model_convolution  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=170)


def main(
    runs: int = typer.Option(10, help="timed rounds per convolution (median reported)"),
    threads: int = typer.Option(1, help="threads of every runtime"),
    only: str = typer.Option("", help="only convolutions whose name contains this"),
    program_input: bool = typer.Option(False, help="each convolution reads the program's input (NCHW) instead"),
    json_path: Path = typer.Option(None, "--json", help="where to write the results [results/convolutions.json]"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded

    import torch

    import phaseconv
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.onnxruntime import OrtSession, to_onnx
    from phaseconv.runtimes.timing import interleaved_times, median_ms
    from phaseconv.targets import host_target

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    rows = []
    for label, (_, c_in, kernel, _, _) in MODEL_CONVOLUTIONS.items():
        if only.lower() not in label.lower():
            continue
        alone, after_depthwise, x = model_convolution(label)
        conv = alone if program_input else after_depthwise
        conv.eval()
        with torch.no_grad():
            ep = torch.export.export(conv, x)
            expected = conv(*x)
        buffers = {
            "stock ExecuTorch": to_xnnpack(ep).buffer,
            "phaseconv, any": phaseconv.lower(ep, target="any").buffer,
            "phaseconv, host": phaseconv.lower(ep, target="host").buffer,
        }
        runners = {name: LoadedProgram(buffer).run for name, buffer in buffers.items()}
        runners["ONNX Runtime"] = OrtSession(to_onnx(ep), threads).run
        runners["eager PyTorch"] = lambda inputs, conv=conv: [conv(*inputs)]
        with torch.no_grad():
            errors = {name: float((run(x)[0] - expected).abs().max()) for name, run in runners.items()}
            times = interleaved_times({name: (lambda run=run, x=x: run(x)) for name, run in runners.items()}, runs)
        macs = expected.numel() * c_in * kernel[0] * kernel[1]
        ms = {name: median_ms(samples) for name, samples in times.items()}
        rows.append({"convolution": label, "macs": macs, "ms": ms, "max_abs_error": errors})

    reads = "the program input" if program_input else "a depthwise convolution"
    table = Table(
        title=f"single convolutions reading {reads}, {threads} thread(s), GMAC/s (median ms), {runs} interleaved runs"
    )
    table.add_column("convolution")
    for name in rows[0]["ms"] if rows else ():
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(
            row["convolution"],
            *(f"{row['macs'] / ms / 1e6:.1f} ({ms:.2f})" for ms in row["ms"].values()),
        )
    console.print(table)
    json_path = json_path or Path(f"results/convolutions{'-program-input' if program_input else ''}.json")
    save_results(json_path, rows, "convolution" if only else None, runs=runs, threads=threads, target=host_target())
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
