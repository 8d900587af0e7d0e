"""Which phaseconv rules make a peer runtime (ONNX Runtime, LiteRT) faster: each rule alone, and all, per model.

    python benchmarks/peer_rules.py [--runtime onnx|litert] [--runs 10] [--only mimi] [--threads 2] [--no-alone]
                                    [--json F]
    python benchmarks/peer_rules.py --outputs [--threads 2]   # short_conv's limit: results/short_conv_outputs_1t.json

Per model: export phaseconv.prepare(model); convert that program for the runtime as it is (stock) and
after phaseconv.rewrite with every rule, with the runtime's export rules (ONNX_RULES, LITERT_RULES; and
LiteRT's for this CPU's target where they differ, LITERT_TARGET_RULES), and
with each rule that applies to it alone; run all of them against eager, interleaved (ONNX Runtime: CPU
provider, ORT_ENABLE_ALL; LiteRT: its interpreter and XNNPACK delegate). With --threads 2, only the
stock conversion and the export rules' (on 2 cores, seven sessions' thread pools slowed one another:
MI-GAN's stock ONNX export 24.3 ms among seven, 8.6 among two). Only that runtime runs in the process:
its times move less than in models.py, which interleaves them with ExecuTorch and eager programs. The
ratio is stock / variant: above 1, the rule makes the runtime faster on that model. Results:
results/onnx_rules.json, results/litert_rules.json (by default).
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
from phaseconv.targets import host_target  # noqa: E402

console = Console(width=200)


def measure(case, runs: int, threads: int, runtime: str = "onnx", alone: bool = True) -> dict:
    import torch

    import phaseconv
    from phaseconv.peers import PEERS
    from phaseconv.rewrite import rewrite_with_report
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    peer = PEERS[runtime]()
    export_rules, convert, session = peer.rules("any"), peer.convert, peer.session
    target_rules = peer.rules(host_target())  # this CPU's own: LiteRT has them per target, ONNX Runtime one set

    module, inputs = case.build()
    module = phaseconv.prepare(module)
    with torch.no_grad():
        expected = module(*inputs)
        ep = torch.export.export(module, inputs)
    applied = Counter()  # the rules that apply: the default ones and the export's own (short_conv)
    for rules in (None, export_rules):
        applied |= Counter(d.rule for d in rewrite_with_report(ep, rules)[1] if d.applied)
    variants = {"stock export": ep, "export rules": phaseconv.rewrite(ep, export_rules)}
    if target_rules != export_rules:  # this CPU's own (export_litert(ep, target="host"))
        variants[f"export rules for {host_target()}"] = phaseconv.rewrite(ep, target_rules)
    if threads == 1 and alone:  # the rules one by one (see above for 2 threads)
        variants["all rules"] = phaseconv.rewrite(ep)
        in_export = {rule.name: rule for rule in target_rules}  # a rule alone in the form the export takes
        variants |= {f"{rule} alone": phaseconv.rewrite(ep, [in_export.get(rule, rule)]) for rule in applied}
    sessions, errors, failures = {}, {}, {}
    for variant, program in variants.items():  # a conversion that fails is recorded, not the end of the run
        try:
            sessions[variant] = session(convert(program), threads)
            errors[variant] = float((sessions[variant].run(inputs)[0] - expected).abs().max())
        except Exception as error:
            sessions.pop(variant, None)
            failures[variant] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
    times = interleaved_times({n: partial(s.run, inputs) for n, s in sessions.items()}, runs, 2)
    ms = {name: median_ms(samples) for name, samples in times.items()}
    name = case.name if threads == 1 else f"{case.name} [{threads} threads]"
    row = {"model": name, "ms": ms, "max_abs_error": errors, "applied": dict(applied), "failures": failures}
    console.print(name, {n: round(v, 2) for n, v in ms.items()}, failures or "")
    return row


def short_conv_outputs(runs: int, threads: int, counts=(1, 2, 4, 8, 16)) -> list[dict]:
    """One Conv1d(1024, 4096, 2) (Mimi's first transposed convolution as a polyphase one: 33.5 MB of
    weights) at a few outputs, on ONNX Runtime as exported and as `short_conv` writes it (a MatMul
    with the weight), interleaved: where the rule's limit of outputs comes from."""
    import torch

    import phaseconv
    from phaseconv.rules.short_conv import ShortConvRule
    from phaseconv.runtimes.onnxruntime import OrtSession, to_onnx
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    torch.manual_seed(0)
    conv = torch.nn.Conv1d(1024, 4096, 2).eval()
    runners, errors = {}, {}
    for count in counts:
        x = torch.randn(1, 1024, count + 1)
        ep = torch.export.export(conv, (x,))
        forms = {"Conv": ep, "MatMul": phaseconv.rewrite(ep, [ShortConvRule(max_outputs=max(counts))])}
        for form, program in forms.items():
            session = OrtSession(to_onnx(program), threads)
            with torch.no_grad():
                errors[(form, count)] = float((session.run((x,))[0] - conv(x)).abs().max())
            runners[(form, count)] = partial(session.run, (x,))
    medians = {key: median_ms(t) for key, t in interleaved_times(runners, runs).items()}
    rows = [{"outputs": n, "conv_ms": medians[("Conv", n)], "matmul_ms": medians[("MatMul", n)]} for n in counts]
    for row in rows:
        row["max_abs_error"] = errors[("MatMul", row["outputs"])]
        console.print(f"{row['outputs']} outputs: Conv {row['conv_ms']:.2f} ms, MatMul {row['matmul_ms']:.2f} ms")
    return rows


def table(rows: list[dict], runtime: str) -> Table:
    title = {"onnx": "ONNX Runtime", "litert": "LiteRT"}[runtime]
    result = Table(title=f"{title}: stock export / phaseconv-rewritten export (above 1: faster)")
    result.add_column("model")
    result.add_column("stock ms", justify="right")
    result.add_column("variant: ratio", justify="left")
    for row in rows:
        ms, stock = row["ms"], row["ms"].get("stock export")
        if stock is None:  # the stock conversion failed (Vocos's complex spectrum): milliseconds instead
            times = ", ".join(f"{n} {v:.1f} ms" for n, v in ms.items())
            result.add_row(row["model"], "failed", times)
            continue
        ratios = ", ".join(f"{n} {stock / v:.2f}x" for n, v in ms.items() if n != "stock export")
        result.add_row(row["model"], f"{stock:.1f}", ratios)
    return result


def main(
    runtime: str = typer.Option("onnx", help="the peer runtime: onnx or litert"),
    alone: bool = typer.Option(True, help="each rule alone too; --no-alone: stock, the export rules and all rules"),
    runs: int = typer.Option(10, help="timed rounds per model (median reported)"),
    only: str = typer.Option("", help="run only models whose name contains this"),
    threads: int = typer.Option(1, help="the runtime's threads"),
    json_path: Path = typer.Option(None, "--json", help="where to write the results (results/RUNTIME_rules.json)"),
    outputs: bool = typer.Option(False, "--outputs", help="short_conv's limit: one convolution at 1-16 outputs"),
) -> None:
    import torch

    torch.set_num_threads(1)  # eager runs once, for the reference outputs
    if outputs:
        json_path = json_path or Path(f"results/short_conv_outputs_{threads}t.json")
        save_results(json_path, short_conv_outputs(runs, threads), runs=runs, threads=threads, target="any")
        console.print(f"wrote {json_path}")
        return
    if runtime not in ("onnx", "litert"):
        raise typer.BadParameter(f"--runtime is onnx or litert, not {runtime!r}")
    json_path = json_path or Path(f"results/{runtime}_rules.json")
    rows = [measure(case, runs, threads, runtime, alone) for case in CASES if only.lower() in case.name.lower()]
    console.print(table(rows, runtime))
    partial_run = "model" if only or threads != 1 else None  # keeps the saved rows it did not measure
    save_results(json_path, rows, partial_run, runs=runs, runtime=runtime, target=host_target(), threads=threads)
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
