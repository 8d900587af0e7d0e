"""Multiply-adds per model: stride-1 convolutions vs transposed convolutions (eager forward hooks).

    python benchmarks/macs.py [--only NAME]

The share in transposed convolutions bounds what rewriting them can gain (Amdahl); MACs over
phaseconv's measured time (results/models.json, 1 thread) is the throughput the program reaches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.models import CASES  # noqa: E402


def count_macs(module, inputs) -> dict[str, int]:
    """{"conv": ..., "transposed": ...}: every convolution's multiply-adds (PyTorch's flop counter,
    functional calls included), those of transposed-convolution modules apart (forward hooks)."""
    import torch
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    transposed = 0

    def hook(layer, args, output):
        nonlocal transposed
        transposed += args[0].numel() * layer.weight[0].numel()  # in elements x out/groups x kernel

    kinds = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, kinds)]
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(*inputs)
    for handle in handles:
        handle.remove()
    total = sum(n for op, n in counter.get_flop_counts()["Global"].items() if "convolution" in str(op)) // 2
    return {"conv": total - transposed, "transposed": transposed}


def main(only: str = typer.Option("", help="only models whose name contains this")) -> None:
    results = Path("results/models.json")
    measured = {}
    if results.exists():
        measured = {
            r["model"]: r["ms"]["phaseconv"] for r in json.loads(results.read_text())["models"] if r["threads"] == 1
        }
    table = Table(title="multiply-adds per model (convolutions)")
    for column in ("model", "conv GMAC", "transposed GMAC", "transposed share", "phaseconv GMAC/s (1 thread)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for case in (c for c in CASES if only.lower() in c.name.lower()):
        macs = count_macs(*case.build())
        total = sum(macs.values())
        rate = f"{total / measured[case.name] / 1e6:.1f}" if case.name in measured else "-"
        table.add_row(
            case.name,
            f"{macs['conv'] / 1e9:.2f}",
            f"{macs['transposed'] / 1e9:.2f}",
            f"{macs['transposed'] / total:.1%}",
            rate,
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    typer.run(main)
