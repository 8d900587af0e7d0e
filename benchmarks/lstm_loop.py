"""Can an LSTM's recurrent weight be packed once without XNNPACK's weight cache? Its forms, measured.

    python benchmarks/lstm_loop.py [--steps 75] [--runs 5] [--json results/lstm_loop.json]

torch.export unrolls an LSTM over its steps, and XNNPACK packs a private copy of the recurrent weight
for every step's operator unless the weight cache is on (EnCodec's decoder: 600 MiB more at load).
ExecuTorch 1.5.1 emits one loop, `torch.ops.higher_order.scan`, whose body runs as often as the
sequence is long. Here EnCodec's LSTM (2 layers, 512 wide, 75 steps per second of audio) as:

- unrolled: `nn.LSTM` as torch.export makes it, lowered as stock ExecuTorch lowers it;
- unrolled by phaseconv: the same program after rules/lstm.py (one partition; a `linear` per step);
- the same, weights at run time: lowered as `phaseconv lower --no-weight-cache` does, each step's
  recurrent weight a run-time input of the delegate, which XNNPACK packs at every step into the
  workspace its operators share (the stock partitioner's force_non_static_weights_for_f32_linear,
  for the linears that share a weight);
- weight first: unrolled, each step's recurrent product as `bmm(W_hh, h)`, the weight the left
  operand, which XNNPACK reads as it is (it packs only the right one): no packed copy, but one
  output column per GEMM tile;
- scan: the input projections as one GEMM per layer, the recurrence as a scan. The XNNPACK
  partitioner does not look inside a scan's body (it would run portable); here its nodes are tagged
  for XNNPACK by hand. Its weight then reaches the delegate as a run-time input, as the scan passes it.

Per program, one thread, default loader (no weight cache): median per call (interleaved), max error
against eager, resident MiB added at load and by the first call (each alone in a fresh process, and
with the weight cache for comparison).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import resident_growth  # noqa: E402
from benchmarks.report import lstm_loop  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=160)
WIDTH, LAYERS = 512, 2


def lstm_modules(steps: int):
    """(unrolled, scan, weight first) modules of one LSTM, and its input [steps, 1, WIDTH]."""
    import torch
    from torch import nn
    from torch._higher_order_ops.scan import scan

    lstm = nn.LSTM(WIDTH, WIDTH, num_layers=LAYERS).eval()

    def cell(gates, c):
        """(h_t, c_t) from the gates (i, f, g, o) and c_{t-1} (None: the zero state)."""
        i, f, g, o = (gates[:, k * WIDTH : (k + 1) * WIDTH] for k in range(4))
        update = torch.sigmoid(i) * torch.tanh(g)
        c = update if c is None else torch.sigmoid(f) * c + update
        return torch.sigmoid(o) * torch.tanh(c), c

    class Unrolled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = lstm

        def forward(self, x):
            return self.lstm(x)[0]

    class Scanned(nn.Module):
        """h_t, c_t = cell(x_t W_ih^T + b + h_{t-1} W_hh^T, c_{t-1}) as a scan over t."""

        def __init__(self):
            super().__init__()
            for layer in range(LAYERS):
                self.register_buffer(f"w_ih{layer}", getattr(lstm, f"weight_ih_l{layer}").detach().clone())
                self.register_buffer(f"w_hh{layer}", getattr(lstm, f"weight_hh_l{layer}").detach().t().contiguous())
                bias = getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
                self.register_buffer(f"bias{layer}", bias.detach())

        def forward(self, x):
            x = x[:, 0]
            for layer in range(LAYERS):
                w_hh = getattr(self, f"w_hh{layer}")
                inputs = nn.functional.linear(x, getattr(self, f"w_ih{layer}"), getattr(self, f"bias{layer}"))[:, None]

                def step(carry, projected, w_hh=w_hh):
                    h, c = cell(projected + torch.mm(carry[0], w_hh), carry[1])
                    return (h, c), h * 1.0  # a node of its own: a delegate cannot return one value twice

                _, x = scan(step, (torch.zeros(1, WIDTH), torch.zeros(1, WIDTH)), inputs)
                x = x[:, 0]
            return x[:, None]

    class WeightFirst(nn.Module):
        """Unrolled, with h_{t-1} W_hh^T as bmm(W_hh [1, 4H, H], h_{t-1} [1, H, 1])."""

        def __init__(self):
            super().__init__()
            for layer in range(LAYERS):
                for name in (f"weight_ih_l{layer}", f"weight_hh_l{layer}"):
                    self.register_buffer(name, getattr(lstm, name).detach().clone())
                bias = getattr(lstm, f"bias_ih_l{layer}") + getattr(lstm, f"bias_hh_l{layer}")
                self.register_buffer(f"bias{layer}", bias.detach())

        def forward(self, x):
            x = x[:, 0]
            for layer in range(LAYERS):
                w_hh = getattr(self, f"weight_hh_l{layer}")[None]
                inputs = nn.functional.linear(x, getattr(self, f"weight_ih_l{layer}"), getattr(self, f"bias{layer}"))
                h = c = None  # the zero state: no recurrent product at the first step, as rules/lstm.py
                steps = []
                for t in range(inputs.shape[0]):
                    gates = inputs[t : t + 1]
                    if h is not None:
                        gates = gates + torch.bmm(w_hh, h.view(1, WIDTH, 1)).view(1, 4 * WIDTH)
                    h, c = cell(gates, c)
                    steps.append(h)
                x = torch.cat(steps)
            return x[:, None]

    return Unrolled(), Scanned(), WeightFirst(), torch.randn(steps, 1, WIDTH)


def scan_bodies_too():
    """XNNPACK's partitioner, and every node of each scan body tagged as one more XNNPACK partition."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.partitioner import Partitioner, PartitionResult
    from executorch.exir.graph_module import get_control_flow_submodules

    class WithScanBodies(Partitioner):
        def __init__(self):
            super().__init__()
            self.xnnpack = XnnpackPartitioner()
            self.delegation_spec = self.xnnpack.delegation_spec

        def ops_to_not_decompose(self, program):
            return self.xnnpack.ops_to_not_decompose(program)

        def partition(self, program):
            result = self.xnnpack.partition(program)
            tags = dict(result.partition_tags)
            for number, (_, body, _) in enumerate(get_control_flow_submodules(program.graph_module)):
                tag = f"scan_body_{number}"
                for node in body.graph.nodes:
                    if node.op == "call_function":
                        node.meta["delegation_tag"] = tag
                tags[tag] = self.delegation_spec
            return PartitionResult(tagged_exported_program=result.tagged_exported_program, partition_tags=tags)

    return WithScanBodies()


def main(
    steps: int = typer.Option(75, help="LSTM steps (EnCodec: 75 per second of audio)"),
    runs: int = typer.Option(5, help="timed rounds (median reported)"),
    json_path: Path = typer.Option(Path("results/lstm_loop.json"), "--json", help="where to write the results"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(1)  # before any program is loaded
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    import phaseconv
    from phaseconv.lowering.xnnpack import partitioner_configs
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import summarize_pte
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    torch.manual_seed(0)
    unrolled, scanned, weight_first, x = lstm_modules(steps)
    with torch.no_grad():
        expected = unrolled(x)
        stock = torch.export.export(unrolled, (x,))
        programs = {
            "unrolled": (stock, XnnpackPartitioner()),
            "unrolled by phaseconv": (phaseconv.rewrite(stock, ["lstm"]), XnnpackPartitioner()),
            "unrolled by phaseconv, weights at run time": (
                phaseconv.rewrite(stock, ["lstm"]),
                XnnpackPartitioner(configs=partitioner_configs(weight_cache=False)),
            ),
            "weight first": (torch.export.export(weight_first, (x,)), XnnpackPartitioner()),
            "scan": (torch.export.export(scanned, (x,)), scan_bodies_too()),
        }
    buffers = {}
    for name, (program, partitioner) in programs.items():
        console.print(f"lowering {name}")
        buffers[name] = to_edge_transform_and_lower(program, partitioner=[partitioner]).to_executorch().buffer
    loaded = {name: LoadedProgram(buffer, weight_cache=False) for name, buffer in buffers.items()}
    errors = {name: (program.run((x,))[0] - expected).abs().max().item() for name, program in loaded.items()}
    times = interleaved_times({name: (lambda p=p: p.run((x,))) for name, p in loaded.items()}, runs, warmup=1)
    del loaded
    growth = resident_growth(buffers, (x,))
    rows = []
    for name, buffer in buffers.items():
        summary = summarize_pte(buffer)
        rows.append(
            {
                "program": name,
                "steps": steps,
                "median_ms": median_ms(times[name]),
                "max_error": errors[name],
                "partitions": summary.partitions,
                "outside": dict(summary.outside),
                "memory": growth[name],
            }
        )
    save_results(
        json_path,
        rows,
        command=f"python benchmarks/lstm_loop.py --steps {steps} --runs {runs}",
        target="any",
        threads=1,
    )
    console.print(lstm_loop(json.loads(json_path.read_text())))


if __name__ == "__main__":
    typer.run(main)
