"""Where a model's time goes inside XNNPACK, and how fast its convolutions and linear layers run
against the machine.

    python benchmarks/operators.py [--only mimi] [--threads 1] [--runs 10] [--json results/operators.json]
    python benchmarks/operators.py --rows                # writes results/fully_connected_rows.json

Per model (the cases of benchmarks/models.py): phaseconv's program (as `phaseconv.lower` makes it)
is run with ETDump on, which times every XNNPACK operator (phaseconv.runtimes.etdump). The table
gives the time per kind of operator; then every convolution's and linear layer's in-model time (1x1
convolutions run as "Fully Connected": both are matched to those events in order), its multiply-adds
per second and their share of XNNPACK's own float32 GEMM at its best on this machine (a large fully
connected layer whose rows fill its tiles), and the same layer lowered and run alone, so a gap
between the two shows what the model around it costs (cold weights, layouts). Weight bytes over
time is the rate a layer streams its weights at, against the machine's memory read rate (a 1 GiB
sum on as many threads, measured here). Beside them, ONNX Runtime's time per kind of node on the
stock export (its profiler) and its Conv nodes' multiply-adds per second. `--rows`: fully
connected layers at the few rows of one-frame decoding, XNNPACK against ONNX Runtime.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import CASES  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=200)
GEMM_KINDS = ("Convolution", "Fully Connected", "Dynamic Fully Connected")  # the last: a run-time weight
CONV_TARGETS = ("aten.conv1d.default", "aten.conv2d.default", "aten.convolution.default")


def _transposed(node) -> bool:
    return str(node.target) == "aten.convolution.default" and bool(node.args[6])


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


def gemm_rate(runs: int) -> float:
    """GMAC/s of XNNPACK's float32 fully connected operator on 448 rows (a multiple of its 7-row
    tile) of 512 -> 256 (a weight that stays in the L2 cache), from ETDump: the ceiling a
    convolution or linear layer of a model reaches on this machine."""
    import torch

    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.etdump import operator_times

    rows, features, outputs = 448, 512, 256
    x = torch.randn(rows, features)
    buffer = to_xnnpack(torch.export.export(torch.nn.Linear(features, outputs, bias=False), (x,))).buffer
    (gemm,) = [t.ms for t in operator_times(buffer, (x,), max(runs, 20)) if t.kind.startswith(GEMM_KINDS)]
    return rows * features * outputs / gemm / 1e6


def ort_kinds(program, inputs, threads: int, runs: int) -> dict[str, list]:
    """ONNX Runtime on the ONNX export of `program` (the stock one: the peer of benchmarks/models.py):
    per kind of node, [ms per call, count], from its profiler (each node's median over `runs` calls
    after 5 untimed ones, summed by kind)."""
    import json
    import tempfile

    import onnxruntime as ort

    from phaseconv.runtimes.onnxruntime import session_options, to_onnx

    with tempfile.TemporaryDirectory() as folder:
        options = session_options(threads)  # as the peer in benchmarks/models.py runs, plus its profiler
        options.enable_profiling, options.profile_file_prefix = True, str(Path(folder) / "ort")
        session = ort.InferenceSession(to_onnx(program), options, providers=["CPUExecutionProvider"])
        feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
        for _ in range(runs + 5):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    nodes = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes[(e["args"]["op_name"], e["name"])].append(e["dur"] / 1e3)
    kinds = defaultdict(lambda: [0.0, 0])
    for (kind, _), ms in nodes.items():
        kinds[kind][0] += statistics.median(ms[5:])
        kinds[kind][1] += 1
    return dict(kinds)


def fully_connected_rows(threads: int, runs: int, rows=(1, 2, 4, 6, 7, 8, 12, 16, 24, 32, 48, 94)) -> list[dict]:
    """16 fully connected layers, 512 -> 2048 -> 512 alternately (67 MB of float32 weights, as in
    Mimi's transformer) at a few rows, through XNNPACK (as stock lowers them, and weight first: the
    transposed_linear rule at every row count) and through ONNX Runtime, interleaved: the weights'
    streaming rate at the row counts of one-frame decoding and beyond."""
    import torch

    import phaseconv
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.rules.transposed_linear import TransposedLinearRule
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.onnxruntime import OrtSession, to_onnx
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    torch.manual_seed(0)
    stack = torch.nn.Sequential(*[torch.nn.Linear(*((512, 2048) if i % 2 == 0 else (2048, 512))) for i in range(16)])
    weight_bytes = sum(p.numel() * 4 for p in stack.parameters())
    every_row_count = [TransposedLinearRule(min_rows=1, max_rows=10**9)]
    runners = {}
    for count in rows:
        x = torch.randn(count, 512)
        program = torch.export.export(stack.eval(), (x,))
        runners[("XNNPACK", count)] = partial(LoadedProgram(to_xnnpack(program).buffer).run, (x,))
        weight_first = to_xnnpack(phaseconv.rewrite(program, every_row_count)).buffer
        runners[("XNNPACK, weight first", count)] = partial(LoadedProgram(weight_first).run, (x,))
        runners[("ONNX Runtime", count)] = partial(OrtSession(to_onnx(program), threads).run, (x,))
    medians = {key: median_ms(t) for key, t in interleaved_times(runners, runs).items()}
    return [
        {"runtime": runtime, "rows": count, "ms": ms, "weights_gb_s": weight_bytes / ms / 1e6}
        for (runtime, count), ms in medians.items()
    ]


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

    from phaseconv.graph.program import ProgramEditor
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.etdump import operator_times

    editor = ProgramEditor(program)

    def value(arg):
        return editor.constant_value(arg) if isinstance(arg, torch.fx.Node) else arg

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


def profile(case, threads: int, runs: int) -> dict:
    import torch

    import phaseconv
    from phaseconv.graph.program import NotConstant, copy_program
    from phaseconv.lowering.xnnpack import PHASECONV_LOWERING, to_xnnpack
    from phaseconv.onnx_export import ONNX_RULES
    from phaseconv.rewrite import rewrite_with_report
    from phaseconv.rules import TARGET_RULES
    from phaseconv.runtimes.etdump import operator_times
    from phaseconv.targets import host_target

    module, inputs = case.build()
    stock = torch.export.export(phaseconv.prepare(module), inputs)
    program, _ = rewrite_with_report(stock, TARGET_RULES[host_target()])
    # a copy: lowering takes the constants phaseconv made out of the program that keeps them for `alone_ms`
    times = operator_times(to_xnnpack(copy_program(program), **PHASECONV_LOWERING).buffer, inputs, runs)
    kinds = defaultdict(lambda: [0.0, 0])
    for t in times:
        kinds[t.kind][0] += t.ms
        kinds[t.kind][1] += 1
    row = {"model": case.name, "total_ms": sum(t.ms for t in times), "kinds": dict(kinds), "layers": []}
    # the peer, and the multiply-adds of the model's (not transposed) convolutions, which its Conv nodes run
    try:
        row["ort_kinds"] = ort_kinds(stock, inputs, threads, runs)
    except Exception:  # a program ONNX's export refuses (Vocos's complex spectrum): phaseconv's export instead
        row["ort_export"] = "phaseconv export"
        row["ort_kinds"] = ort_kinds(rewrite_with_report(stock, ONNX_RULES)[0], inputs, threads, runs)
    stock_convs = [n for n in gemm_nodes(stock) if str(n.target) in CONV_TARGETS and not _transposed(n)]
    row["conv_macs"] = sum(conv_shape(n)["macs"] for n in stock_convs)
    gemm_events = [t for t in times if t.kind.startswith(GEMM_KINDS)]
    nodes = gemm_nodes(program)
    if len(gemm_events) != len(nodes):  # an op fused away or split: no per-conv matching
        row["unmatched"] = f"{len(nodes)} conv/linear nodes, {len(gemm_events)} operators"
        return row
    for node, event in zip(nodes, gemm_events, strict=True):
        try:
            alone = alone_ms(node, program, runs)
        except NotConstant:  # a product of two activations (attention's): no weight to lower it alone with
            continue
        row["layers"].append({**conv_shape(node), "ms": event.ms, "alone_ms": alone})
    return row


def per_ms(amount: float, ms: float, unit: float) -> str:
    """amount / ms in `unit`s per second; "-" when the time is below the timer's resolution."""
    return f"{amount / ms / unit * 1e3:.1f}" if ms > 0 else "-"


def kinds_table(title: str, kinds: dict[str, list]) -> Table:
    """Time per kind of operator, the ten largest."""
    total = sum(ms for ms, _ in kinds.values())
    table = Table(title=f"{title}: {total:.1f} ms")
    for column in ("operator", "ms", "share", "count"):
        table.add_column(column, justify="left" if column == "operator" else "right")
    for kind, (ms, count) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:10]:
        table.add_row(kind, f"{ms:.2f}", f"{ms / total:.0%}", str(count))
    return table


def report(row: dict, read_rate: float, gemm: float) -> None:
    console.print(kinds_table(f"{row['model']}: XNNPACK operators", row["kinds"]))
    export = row.get("ort_export", "stock export")
    console.print(kinds_table(f"{row['model']}: ONNX Runtime nodes ({export})", row["ort_kinds"]))
    ort_conv_ms = sum(row["ort_kinds"].get(kind, [0.0])[0] for kind in ("Conv", "FusedConv"))
    console.print(
        f"{row['conv_macs'] / 1e9:.2f} GMAC in the model's convolutions: ONNX Runtime's Conv / FusedConv nodes at "
        f"{per_ms(row['conv_macs'], ort_conv_ms, 1e9)} GMAC/s; XNNPACK's float32 GEMM at its best: {gemm:.1f}"
    )
    if "unmatched" in row:
        console.print(f"layers not matched to operators: {row['unmatched']}")
        return
    convs = Table(title=f"{row['model']}: convolutions and linear layers (memory read rate {read_rate:.1f} GB/s)")
    columns = (
        "input",
        "weight",
        "in model ms",
        "alone ms",
        "GMAC/s in model",
        "of best",
        "GMAC/s alone",
        "weights GB/s",
    )
    for column in columns:
        convs.add_column(column, justify="left" if column in ("input", "weight") else "right")
    for conv in row["layers"]:
        convs.add_row(
            str(conv["input"]),
            str(conv["weight"]),
            f"{conv['ms']:.3f}",
            f"{conv['alone_ms']:.3f}",
            per_ms(conv["macs"], conv["ms"], 1e9),
            f"{conv['macs'] / conv['ms'] / 1e6 / gemm:.0%}" if conv["ms"] > 0 else "-",
            per_ms(conv["macs"], conv["alone_ms"], 1e9),
            per_ms(conv["weight_bytes"], conv["ms"], 1e9),
        )
    macs = sum(c["macs"] for c in row["layers"])
    model_ms = sum(c["ms"] for c in row["layers"])
    alone = sum(c["alone_ms"] for c in row["layers"])
    rate = macs / model_ms / 1e6
    convs.add_row(
        "all", "", f"{model_ms:.2f}", f"{alone:.2f}", f"{rate:.1f}", f"{rate / gemm:.0%}", f"{macs / alone / 1e6:.1f}"
    )
    console.print(convs)


def main(
    only: str = typer.Option("", help="only models whose name contains this"),
    threads: int = typer.Option(1, help="XNNPACK threads"),
    runs: int = typer.Option(10, help="calls timed per program (median per operator)"),
    json_path: Path = typer.Option(
        None, "--json", help="where to write the results (results/operators.json; --rows: fully_connected_rows.json)"
    ),
    rows: bool = typer.Option(False, "--rows", help="fully connected layers at 1-94 rows: XNNPACK, weight first, ORT"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded
    if rows:
        json_path = json_path or Path("results/fully_connected_rows.json")
        measured = fully_connected_rows(threads, max(runs, 20))
        table = Table(title="16 fully connected layers (67 MB of weights)")
        for column in ("runtime", "rows", "ms", "weights GB/s"):
            table.add_column(column, justify="left" if column == "runtime" else "right")
        for r in measured:
            table.add_row(r["runtime"], str(r["rows"]), f"{r['ms']:.2f}", f"{r['weights_gb_s']:.1f}")
        console.print(table)
        from phaseconv.targets import host_target

        save_results(json_path, measured, threads=threads, runs=max(runs, 20), target=host_target())
        console.print(f"wrote {json_path}")
        return
    json_path = json_path or Path("results/operators.json")
    read_rate, gemm = memory_read_rate(threads), gemm_rate(runs)
    rows = []
    for case in (c for c in CASES if only.lower() in c.name.lower()):
        rows.append(profile(case, threads, runs))
        report(rows[-1], read_rate, gemm)
    partial = "model" if only else None  # a partial run updates its rows in the saved results
    from phaseconv.targets import host_target

    save_results(
        json_path,
        rows,
        partial,
        threads=threads,
        runs=runs,
        memory_read_gb_s=read_rate,
        gemm_gmac_s=gemm,
        target=host_target(),
    )
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
