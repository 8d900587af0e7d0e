"""`phaseconv bench`: stock and rewritten programs through the runtime, one process per thread count.

XNNPACK's thread pool can only be sized before the first program is loaded, so each thread count
runs in a fresh worker process (`python -m phaseconv.bench`), which prints one line per timed round.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from phaseconv.errors import PhaseconvError


def run_worker(
    spec: str, threads: int, runs: int, out: Path, prepare: bool = True, lengths: tuple = (), target: str = "host"
) -> None:
    """Lower once; time at the example inputs, or at each of `lengths` of a dynamic program."""
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)
    from phaseconv.compare import checked_on, lower_stock_and_rewritten, time_variants
    from phaseconv.models.loading import inputs_at_length, load_model

    source = load_model(spec, prepare=prepare)
    cases = {None: source.inputs} | {n: inputs_at_length(source.program, source.inputs, n) for n in lengths}
    if lengths:
        del cases[None]
    comparison = lower_stock_and_rewritten(source.program, source.inputs, target)
    results = []
    for length, inputs in cases.items():
        at_length = checked_on(comparison, source.program, inputs)
        time_variants(at_length, inputs, runs, on_round=lambda: print("round", flush=True))
        results.append({"model": source.name, "threads": threads, "length": length, **at_length.to_dict()})
    out.write_text(json.dumps(results))


def bench(
    spec: str,
    threads: list[int],
    runs: int,
    on_round: Callable[[], None] = lambda: None,
    prepare: bool = True,
    lengths: tuple[int, ...] = (),
    target: str = "host",
) -> list[dict]:
    """One result per thread count (and length of a dynamic program: `lengths`), phaseconv's program
    lowered for `target`; `on_round` is called after every timed round of every worker."""
    results = []
    for count in threads:
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "result.json"
            command = [
                sys.executable,
                "-m",
                "phaseconv.bench",
                spec,
                str(count),
                str(runs),
                str(out),
                str(prepare),
                target,
            ]
            command += [str(n) for n in lengths]
            worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for line in worker.stdout:
                if line.strip() == "round":
                    on_round()
            stderr = worker.stderr.read()
            if worker.wait() != 0:
                last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or ["no message"]
                raise PhaseconvError(f"the benchmark worker at {count} thread(s) failed: {last[0]}")
            results += json.loads(out.read_text())
    return results


def plot(results: list[dict], path) -> None:
    """A bar chart: median ms of the stock and the phaseconv program per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['threads']} thread(s)" + (f", length {r['length']}" if r["length"] else "") for r in results]
    stock = [r["programs"]["stock"]["median_ms"] for r in results]
    fast = [r["programs"]["phaseconv"]["median_ms"] for r in results]
    positions = range(len(results))
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.bar([p - 0.2 for p in positions], stock, 0.4, label="stock XNNPACK")
    axes.bar([p + 0.2 for p in positions], fast, 0.4, label="phaseconv")
    for p, r in zip(positions, results):
        axes.annotate(f"{r['speedup']:.2f}x", (p + 0.2, fast[p]), ha="center", va="bottom")
    axes.set_xticks(list(positions), labels)
    axes.set_ylabel("median ms per run")
    axes.set_title(results[0]["model"])
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


if __name__ == "__main__":
    spec, threads, runs, out, prepare, target, *lengths = sys.argv[1:]
    try:
        run_worker(spec, int(threads), int(runs), Path(out), prepare == "True", tuple(map(int, lengths)), target)
    except PhaseconvError as error:
        print(f"phaseconv: error: {error}", file=sys.stderr)
        sys.exit(2)
