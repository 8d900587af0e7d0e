"""Which phaseconv rules make ONNX Runtime faster: each rule alone, and all, per model, 1 thread.

    python benchmarks/onnx_rules.py [--runs 10] [--only mimi] [--json results/onnx_rules.json]

Per model: export phaseconv.prepare(model); export that program to ONNX as it is (stock) and after
phaseconv.rewrite with every rule, and with each rule that applies to it alone; run all of them in
ONNX Runtime (CPU provider, ORT_ENABLE_ALL, 1 thread) against eager, interleaved. The ratio is
stock / variant: above 1, the rule makes ONNX Runtime faster on that model. `phaseconv.export_onnx`
uses the rules that paid (ONNX_RULES in src/phaseconv/onnx_export.py).
"""

from __future__ import annotations

import sys
from collections import Counter
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import CASES  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=200)


def measure(case, runs: int) -> dict:
    import torch

    import phaseconv
    from phaseconv.onnx_export import ONNX_RULES
    from phaseconv.rewrite import rewrite_with_report
    from phaseconv.runtimes.onnxruntime import OrtSession, to_onnx
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    module, inputs = case.build()
    module = phaseconv.prepare(module)
    with torch.no_grad():
        expected = module(*inputs)
        ep = torch.export.export(module, inputs)
    _, decisions = rewrite_with_report(ep)
    applied = Counter(d.rule for d in decisions if d.applied)
    variants = {"stock export": ep, "all rules": phaseconv.rewrite(ep)}
    variants["export_onnx rules"] = phaseconv.rewrite(ep, ONNX_RULES)
    variants |= {f"{rule} alone": phaseconv.rewrite(ep, [rule]) for rule in applied}
    sessions = {name: OrtSession(to_onnx(program)) for name, program in variants.items()}
    errors = {name: float((s.run(inputs)[0] - expected).abs().max()) for name, s in sessions.items()}
    times = interleaved_times({n: partial(s.run, inputs) for n, s in sessions.items()}, runs, 2)
    ms = {name: median_ms(samples) for name, samples in times.items()}
    row = {"model": case.name, "ms": ms, "max_abs_error": errors, "applied": dict(applied)}
    console.print(case.name, {n: round(v, 2) for n, v in ms.items()})
    return row


def table(rows: list[dict]) -> Table:
    result = Table(title="ONNX Runtime 1 thread: stock export / phaseconv-rewritten export (above 1: faster)")
    result.add_column("model")
    result.add_column("stock ms", justify="right")
    result.add_column("variant: ratio", justify="left")
    for row in rows:
        ms = row["ms"]
        ratios = ", ".join(f"{n} {ms['stock export'] / v:.2f}x" for n, v in ms.items() if n != "stock export")
        result.add_row(row["model"], f"{ms['stock export']:.1f}", ratios)
    return result


def main(
    runs: int = typer.Option(10, help="timed rounds per model (median reported)"),
    only: str = typer.Option("", help="run only models whose name contains this"),
    json_path: Path = typer.Option(Path("results/onnx_rules.json"), "--json", help="where to write the results"),
) -> None:
    import torch

    torch.set_num_threads(1)
    rows = [measure(case, runs) for case in CASES if only.lower() in case.name.lower()]
    console.print(table(rows))
    save_results(json_path, rows, runs=runs, threads=1)
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
