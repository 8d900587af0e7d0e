"""How close pocket-tts's text-to-speech program runs to this machine's limits, on one core.

    python benchmarks/tts_limits.py [--config english] [--quantize 8da4w,8da8w] [--position 220] [--runs 30]
                                    [--json results/tts_limits.json]

The machine, on one thread:
- its memory read rate: a float32 sum over a buffer of each size a method reads (the first pass
  untimed, so a buffer that fits a cache is read from it, as a method called frame after frame
  reads its weights) and over 1 GiB;
- XNNPACK's best rate for each kernel the program runs, the kernel alone with a weight that stays in
  the L2 cache (its time from ETDump): fully connected in float32, 8da4w and 8da8w at one row (the
  language model's step and the flow head: a product of a vector) and at PROMPT_TOKENS rows (the
  prompt), and float32 GEMM at its best (448 rows of 512 -> 256: the decoder's convolutions).

Per method of the program (random weights, lowered as `phaseconv lower pocket-tts-tts:CONFIG` does,
float32 and with the language model's linears in each `--quantize` scheme): the bytes a call reads (the weights
XNNPACK holds for it, as the file packs them, and for the language model the cache positions it
attends), its multiply-adds (PyTorch's flop counter on the exported method), its time per call
(median of consecutive calls, through ExecuTorch's Python binding) and inside its operators
(ETDump). Its floor is the larger of bytes / read rate and multiply-adds / the best rate of its
kernel; measured / floor says how much is left. The language model's step is the
`generate` method whose cache blocks hold `--position` (a 150-frame utterance's last frame after a
stand-in voice and a sentence); the flow head is `flow_net` lowered alone (one LSD step), the
part of `generate` after the transformer.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import typer
from rich.console import Console
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.operators import gemm_rate  # noqa: E402
from benchmarks.report import tts_limits as limits_tables  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=160)
KERNEL_FEATURES = 512  # a 512 x 512 weight: 1 MiB in float32, in the L2 cache


def read_rate(size: int, repeats: int = 7) -> float:
    """GB/s of a float32 sum over `size` bytes on this thread, the median of `repeats` after one untimed pass."""
    import torch

    data = torch.ones(max(size // 4, 1))
    data.sum()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - start)
    return size / statistics.median(times) / 1e9


def fully_connected_rate(scheme: str, rows: int, runs: int) -> float:
    """GMAC/s of XNNPACK's fully connected operator alone on `rows` rows of KERNEL_FEATURES ->
    KERNEL_FEATURES, its weight in `scheme` (fp32, 8da4w or 8da8w, as quantize_linears quantizes)."""
    import torch

    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.models.pocket_tts.language_model import quantize_linears
    from phaseconv.runtimes.etdump import operator_times

    module = KernelProbe().eval()
    if scheme != "fp32":
        quantize_linears(module, scheme)
    x = torch.randn(rows, KERNEL_FEATURES)
    buffer = to_xnnpack(torch.export.export(module, (x,))).buffer
    times = operator_times(buffer, (x,), max(runs, 200), statistics.mean)  # a few microseconds a call
    if scheme != "fp32" and any("(NC, F32)" in t.name for t in times):
        raise SystemExit(f"the {scheme} probe was lowered in float32")
    times = [t.ms for t in times if t.kind.startswith("Fully Connected")]
    return rows * KERNEL_FEATURES * KERNEL_FEATURES / sum(times) / 1e6


class KernelProbe(nn.Module):
    """One linear layer, named as quantize_linears picks the language model's."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.Sequential(nn.Linear(KERNEL_FEATURES, KERNEL_FEATURES, bias=False))

    def forward(self, x):
        return self.transformer(x)


def kernel_rates(schemes: list[str], runs: int) -> dict[str, float]:
    from phaseconv.tts.contract import PROMPT_TOKENS

    rates = {"gemm fp32": gemm_rate(runs)}
    for scheme in schemes:
        rates[f"gemv {scheme}"] = fully_connected_rate(scheme, 1, runs)
        rates[f"gemm {scheme} {PROMPT_TOKENS} rows"] = fully_connected_rate(scheme, PROMPT_TOKENS, runs)
    return rates


class FlowHead(nn.Module):
    """The flow head of one generate call: its sampler (one LSD step) over `flow_net` from the
    transformer's last hidden state."""

    def __init__(self, generate):
        super().__init__()
        self.flow_net, self.sample = generate.flow_net, generate.sample

    def forward(self, hidden, noise):
        return self.sample(functools.partial(self.flow_net, hidden), noise)


def consecutive_ms(call, runs: int) -> float:
    """The median ms of `runs` calls one after the other (after 3 untimed), as a stream calls a method
    frame after frame. (Interleaved with other methods and a settling wait between, as
    runtimes.timing does, these calls of a few milliseconds measured up to twice as long.)"""
    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def macs(module, inputs) -> int:
    """Multiply-adds of one call of a module (PyTorch's flop counter: two flops each)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(*inputs)
    return counter.get_total_flops() // 2


def measured_methods(config: str, quantize: str | None, position: int, runs: int, folder: Path) -> list[dict]:
    """Each measured method of the config's program (LM linears in `quantize`): bytes, MACs, ms per call."""
    import torch

    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.models.pocket_tts.language_model import CACHE_BLOCK, Generate, quantize_linears, with_cache
    from phaseconv.runtimes.etdump import kind_times
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import constant_bytes
    from phaseconv.tts.build import DECODE_FRAMES, lower_tts, tts_programs
    from phaseconv.tts.contract import decode_method, generate_method, prompt_method
    from phaseconv.tts.source import random_model

    model = random_model(config)
    programs, _, settings = tts_programs(model)
    lowered, _ = lower_tts(model, quantize=quantize, scratch=folder)
    path = lowered.save(folder / "tts.pte")[0]
    packed = constant_bytes(path.read_bytes())

    block = min(b for b in settings.generate_blocks if (b + 1) * CACHE_BLOCK > position)
    cache_bytes = settings.layers * 2 * (block + 1) * CACHE_BLOCK * settings.kv_heads * settings.head_dim * 4
    generate, prompt = generate_method(block), prompt_method(settings.prompt_blocks[0])
    inputs = {name: programs[name].example_inputs[0] for name in (generate, prompt, *map(decode_method, DECODE_FRAMES))}
    latent, start, noise, _ = inputs[generate]
    inputs[generate] = (latent, start, noise, torch.tensor([position]))
    rows = {
        generate: {"part": "language model step and flow head", "kernel": "gemv", "cache_bytes": cache_bytes},
        prompt: {"part": f"prompt ({settings.prompt_blocks[0]} block)", "kernel": "gemm rows", "cache_bytes": 0},
        **{decode_method(f): {"part": f"decoder, {f} frame(s) a call", "kernel": "gemm fp32"} for f in DECODE_FRAMES},
    }
    loaded = LoadedProgram(path, methods=list(rows))
    runners = {name: functools.partial(loaded.run, inputs[name], method=name) for name in rows}

    flow_lm = with_cache(model.tts.flow_lm, settings.capacity)
    if quantize is not None:
        quantize_linears(flow_lm, quantize)
    head = FlowHead(Generate(flow_lm, block)).eval()
    z_proj = model.tts.flow_lm.z_proj  # the flow head's condition: the hidden state, projected where z_proj is
    width = settings.dim if z_proj is None else z_proj.out_features
    head_inputs = (torch.randn(1, width), torch.zeros(1, settings.latent_dim))
    with torch.no_grad():
        head_program = torch.export.export(head, head_inputs)
        head_buffer = to_xnnpack(head_program).buffer
    head_loaded = LoadedProgram(head_buffer)
    runners["flow head"] = functools.partial(head_loaded.run, head_inputs)
    rows["flow head"] = {"part": "flow head alone (flow_net, one LSD step)", "kernel": "gemv", "cache_bytes": 0}
    fp32_head = FlowHead(Generate(model.tts.flow_lm, block)).eval()  # the same multiply-adds

    medians = {name: consecutive_ms(runner, runs) for name, runner in runners.items()}
    del loaded  # ETDump loads the program again
    program = path.read_bytes()
    kinds = {name: kind_times(program, inputs[name], runs, name) for name in rows if name != "flow head"}
    kinds["flow head"] = kind_times(head_buffer, head_inputs, runs)
    result = []
    for name, row in rows.items():
        module = fp32_head if name == "flow head" else programs[name].module()
        counted = macs(module, head_inputs if name == "flow head" else inputs[name])
        weights = constant_bytes(head_buffer)["forward"] if name == "flow head" else packed[name]
        result.append(
            {
                "config": config,
                "quantize": quantize or "fp32",
                "method": name,
                **row,
                "weight_bytes": weights,
                "bytes": weights + row.get("cache_bytes", 0),
                "macs": counted,
                "ms": medians[name],
                "operators_ms": sum(kinds[name].values()),
                **({"operator_ms": kinds[name]} if name == generate else {}),
            }
        )
    return result


def with_floors(rows: list[dict], rates: dict[str, float]) -> list[dict]:
    """Each row's floor: max(bytes / read rate at its size, MACs / its kernel's best rate)."""
    from phaseconv.tts.contract import PROMPT_TOKENS

    read_rates = {size: read_rate(size) for size in {row["bytes"] for row in rows}}  # methods of one size share it
    for row in rows:
        scheme = row["quantize"]
        kernel = {
            "gemv": f"gemv {scheme}",
            "gemm rows": f"gemm {scheme} {PROMPT_TOKENS} rows",
            "gemm fp32": "gemm fp32",
        }[row["kernel"]]
        row["read_gb_s"] = read_rates[row["bytes"]]
        row["kernel_gmac_s"] = rates[kernel]
        memory_ms, compute_ms = row["bytes"] / row["read_gb_s"] / 1e6, row["macs"] / rates[kernel] / 1e6
        row["floor_ms"] = max(memory_ms, compute_ms)
        row["bound"] = "memory" if memory_ms >= compute_ms else "compute"
        row["of_floor"] = row["ms"] / row["floor_ms"]
    return rows


def main(
    config: str = typer.Option("english", help="a pocket-tts config"),
    quantize: str = typer.Option(
        "8da4w,8da8w", help="the language model's linears in the other programs, comma-separated"
    ),
    position: int = typer.Option(220, help="the cache position of the measured language model step"),
    runs: int = typer.Option(30, min=5, help="calls per method, and per kernel"),
    json_path: Path = typer.Option(Path("results/tts_limits.json"), "--json", help="where to write the results"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(1)  # one core, before any program is loaded
    import torch

    torch.set_num_threads(1)
    schemes = [scheme for scheme in quantize.split(",") if scheme]
    machine = {"read_1gib_gb_s": read_rate(2**30), "kernels": kernel_rates(["fp32", *schemes], runs)}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for scheme in (None, *schemes):
            console.print(f"lowering and timing {config} ({scheme or 'fp32'})")
            rows += measured_methods(config, scheme, position, runs, Path(folder))
    rows = with_floors(rows, machine["kernels"])
    from phaseconv.targets import host_target

    save_results(json_path, rows, runs=runs, threads=1, position=position, target=host_target(), floors=machine)
    print(limits_tables(json.loads(json_path.read_text())))  # the tables the docs show
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
