"""Single layers and operators: stock vs rewritten programs through the ExecuTorch runtime.

    python benchmarks/run.py [--runs 20] [--threads 1] [--only NAME] [--json results/layers.json]

(Whole models: benchmarks/models.py.)

Every program of a case runs once per round, interleaved in one process; the table gives medians.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import track
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

console = Console(width=190)


def main(
    runs: int = typer.Option(20, help="timed rounds per case (median reported)"),
    threads: int = typer.Option(1, help="XNNPACK threads"),
    json_path: Path = typer.Option(Path("results/layers.json"), "--json", help="where to write the results"),
    only: str = typer.Option("", help="run only cases whose name contains this"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded: later it crashes the runtime

    import torch

    import phaseconv
    from benchmarks.layers import (
        depthwise_cases,
        layer_cases,
        operator_cases,
        stft_cases,
        upsample_conv_cases,
    )
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import summarize_pte
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    cases = layer_cases() + depthwise_cases() + operator_cases() + upsample_conv_cases() + stft_cases()
    rows = []
    cases = [c for c in cases if only in c.name]
    for case in track(cases, description="benchmarking layers", console=console):
        with torch.no_grad():
            ep = torch.export.export(case.module, case.inputs)
        decisions = phaseconv.explain(ep)
        programs = {"stock": ep, "phaseconv": phaseconv.rewrite(ep)}
        if case.limit is not None:
            programs["limit"] = torch.export.export(case.limit, case.inputs)
        loaded, summaries = {}, {}
        for name, program in programs.items():
            buffer = to_xnnpack(program).buffer
            summaries[name] = summarize_pte(buffer).to_dict()
            loaded[name] = LoadedProgram(buffer)
        with torch.no_grad():
            expected = case.module(*case.inputs)
        error = float((loaded["phaseconv"].run(case.inputs)[0].float() - expected.float()).abs().max())
        times = interleaved_times({n: (lambda p=p, x=case.inputs: p.run(x)) for n, p in loaded.items()}, runs)
        ms = {name: median_ms(samples) for name, samples in times.items()}
        rows.append(
            {
                "case": case.name,
                "ms": ms,
                "speedup": ms["stock"] / ms["phaseconv"],
                "vs_limit": ms["phaseconv"] / ms["limit"] if "limit" in ms else None,
                "max_abs_error": error,
                "applied": any(d.applied for d in decisions),
                "decisions": [d.to_dict() for d in decisions],
                "delegation": summaries,
            }
        )

    table = Table(title=f"layers, ExecuTorch XNNPACK, {threads} thread(s), median of {runs} interleaved runs")
    columns = ("case", "stock ms", "phaseconv ms", "limit ms", "speedup", "x limit", "max |err|", "rewritten")
    columns += ("partitions", "outside (stock -> phaseconv)", "transposes")
    for column in columns:
        table.add_column(column, justify="left" if column in ("case", "outside (stock -> phaseconv)") else "right")
    for row in rows:
        ms = row["ms"]
        table.add_row(
            row["case"],
            f"{ms['stock']:.3f}",
            f"{ms['phaseconv']:.3f}",
            f"{ms['limit']:.3f}" if "limit" in ms else "-",
            f"{row['speedup']:.2f}x",
            f"{row['vs_limit']:.2f}" if row["vs_limit"] else "-",
            f"{row['max_abs_error']:.1e}",
            "yes" if row["applied"] else "declined",
            f"{row['delegation']['stock']['partitions']} -> {row['delegation']['phaseconv']['partitions']}",
            f"{sum(row['delegation']['stock']['outside'].values())} -> "
            f"{sum(row['delegation']['phaseconv']['outside'].values())}",
            " -> ".join(str(row["delegation"][p]["layout_transposes"]) for p in ("stock", "phaseconv")),
        )
    speedups = [row["speedup"] for row in rows]
    geomean = torch.tensor(speedups).log().mean().exp().item()
    console.print(table)
    console.print(f"geometric-mean speedup over stock: {geomean:.2f}x; slowest case: {min(speedups):.2f}x")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"threads": threads, "runs": runs, "machine": platform.machine(), "processor": platform.processor()}
    json_path.write_text(json.dumps({"meta": meta, "geomean_speedup": geomean, "layers": rows}, indent=2))
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
