"""Where a model's time goes inside XNNPACK, and how fast its convolutions run against the machine.

    python benchmarks/operators.py [--only mimi] [--threads 1] [--runs 10] [--json results/operators.json]

Per model (the cases of benchmarks/models.py): phaseconv's program (as `phaseconv.lower` makes it)
is run with ETDump on, which times every XNNPACK operator (phaseconv.runtimes.etdump). The table
gives the time per kind of operator; then every convolution's in-model time (1x1 ones run as
"Fully Connected": convs and linears are matched to those events in order), its multiply-adds per
second, and the same convolution lowered and run alone, so a gap between the two shows what the
model around it costs (cold weights, layouts) and the alone figure what XNNPACK reaches on this
machine. Weight bytes over time is the rate a convolution streams its weights at, against the
machine's memory read rate (a 1 GiB sum on as many threads, measured here).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import CASES  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=200)
GEMM_KINDS = ("Convolution", "Fully Connected")
CONV_TARGETS = ("aten.conv1d.default", "aten.conv2d.default", "aten.convolution.default")


def memory_read_rate(threads: int) -> float:
    """GB/s of a sum over 1 GiB of float32 on `threads` threads (median of 5): what streaming cold
    weights can reach with the cores XNNPACK is given."""
    import torch

    torch.set_num_threads(threads)
    data = torch.ones(2**28)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - start)
    return data.numel() * 4 / statistics.median(times) / 1e9


def gemm_nodes(program) -> list:
    """Convolutions and linear layers in graph order: the ops XNNPACK runs as Convolution or Fully
    Connected operators, one each."""
    return [
        n
        for n in program.graph.nodes
        if n.op == "call_function" and (str(n.target) in CONV_TARGETS or str(n.target) == "aten.linear.default")
    ]


def conv_shape(node) -> dict:
    x, w, y = (v.meta["val"] for v in (node.args[0], node.args[1], node))
    return {
        "input": list(x.shape),
        "weight": list(w.shape),
        "output": list(y.shape),
        "macs": y.numel() * w[0].numel(),
        "weight_bytes": w.numel() * w.element_size(),
    }


def alone_ms(node, program, runs: int) -> float:
    """The convolution `node` of `program` lowered alone (same weight, settings, input shape); the
    median time of its Convolution / Fully Connected operator."""
    import torch

    from phaseconv.runtimes.etdump import operator_times
    from phaseconv.runtimes.executorch import to_xnnpack

    editor_constants = {**dict(program.named_parameters()), **dict(program.named_buffers()), **program.constants}
    specs = {s.arg.name: s.target for s in program.graph_signature.input_specs}

    def value(arg):
        if isinstance(arg, torch.fx.Node):
            return editor_constants[specs[arg.name]]
        return arg

    weight, bias = value(node.args[1]), value(node.args[2]) if len(node.args) > 2 else None
    settings = [value(a) for a in node.args[3:]]
    target = node.target

    class Alone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("weight", weight.detach().clone())
            self.register_buffer("bias", None if bias is None else bias.detach().clone())

        def forward(self, x):
            return target(x, self.weight, self.bias, *settings)

    x = torch.randn(node.args[0].meta["val"].shape)
    buffer = to_xnnpack(torch.export.export(Alone(), (x,))).buffer
    times = [t.ms for t in operator_times(buffer, (x,), runs) if t.kind.startswith(GEMM_KINDS)]
    return times[0]


def profile(case, runs: int) -> dict:
    import torch

    import phaseconv
    from phaseconv.rewrite import rewrite_with_report
    from phaseconv.rules import TARGET_RULES
    from phaseconv.runtimes.etdump import operator_times
    from phaseconv.runtimes.executorch import PHASECONV_LOWERING, to_xnnpack
    from phaseconv.targets import host_target

    module, inputs = case.build()
    program, _ = rewrite_with_report(
        torch.export.export(phaseconv.prepare(module), inputs), TARGET_RULES[host_target()]
    )
    times = operator_times(to_xnnpack(program, **PHASECONV_LOWERING).buffer, inputs, runs)
    kinds = defaultdict(lambda: [0.0, 0])
    for t in times:
        kinds[t.kind][0] += t.ms
        kinds[t.kind][1] += 1
    row = {"model": case.name, "total_ms": sum(t.ms for t in times), "kinds": dict(kinds), "convolutions": []}
    gemm_events = [t for t in times if t.kind.startswith(GEMM_KINDS)]
    nodes = gemm_nodes(program)
    if len(gemm_events) != len(nodes):  # an op fused away or split: no per-conv matching
        row["unmatched"] = f"{len(nodes)} conv/linear nodes, {len(gemm_events)} operators"
        return row
    for node, event in zip(nodes, gemm_events, strict=True):
        if str(node.target) in CONV_TARGETS:
            row["convolutions"].append({**conv_shape(node), "ms": event.ms, "alone_ms": alone_ms(node, program, runs)})
    return row


def per_ms(amount: float, ms: float, unit: float) -> str:
    """amount / ms in `unit`s per second; "-" when the time is below the timer's resolution."""
    return f"{amount / ms / unit * 1e3:.1f}" if ms > 0 else "-"


def report(row: dict, read_rate: float) -> None:
    kinds = Table(title=f"{row['model']}: {row['total_ms']:.1f} ms of XNNPACK operators")
    for column in ("operator", "ms", "share", "count"):
        kinds.add_column(column, justify="left" if column == "operator" else "right")
    for kind, (ms, count) in sorted(row["kinds"].items(), key=lambda kv: -kv[1][0])[:10]:
        kinds.add_row(kind, f"{ms:.2f}", f"{ms / row['total_ms']:.0%}", str(count))
    console.print(kinds)
    if "unmatched" in row:
        console.print(f"convolutions not matched to operators: {row['unmatched']}")
        return
    convs = Table(title=f"{row['model']}: convolutions (machine memory read rate {read_rate:.1f} GB/s)")
    columns = ("input", "weight", "in model ms", "alone ms", "GMAC/s in model", "GMAC/s alone", "weights GB/s")
    for column in columns:
        convs.add_column(column, justify="left" if column in ("input", "weight") else "right")
    for conv in row["convolutions"]:
        convs.add_row(
            str(conv["input"]),
            str(conv["weight"]),
            f"{conv['ms']:.3f}",
            f"{conv['alone_ms']:.3f}",
            per_ms(conv["macs"], conv["ms"], 1e9),
            per_ms(conv["macs"], conv["alone_ms"], 1e9),
            per_ms(conv["weight_bytes"], conv["ms"], 1e9),
        )
    macs = sum(c["macs"] for c in row["convolutions"])
    model_ms = sum(c["ms"] for c in row["convolutions"])
    alone = sum(c["alone_ms"] for c in row["convolutions"])
    convs.add_row(
        "all", "", f"{model_ms:.2f}", f"{alone:.2f}", f"{macs / model_ms / 1e6:.1f}", f"{macs / alone / 1e6:.1f}"
    )
    console.print(convs)


def main(
    only: str = typer.Option("", help="only models whose name contains this"),
    threads: int = typer.Option(1, help="XNNPACK threads"),
    runs: int = typer.Option(10, help="calls timed per program (median per operator)"),
    json_path: Path = typer.Option(Path("results/operators.json"), "--json", help="where to write the results"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded
    read_rate = memory_read_rate(threads)
    rows = []
    for case in (c for c in CASES if only.lower() in c.name.lower()):
        rows.append(profile(case, runs))
        report(rows[-1], read_rate)
    partial = "model" if only else None  # a partial run updates its rows in the saved results
    save_results(json_path, rows, partial, threads=threads, runs=runs, memory_read_gb_s=read_rate)
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
