"""Stock vs phaseconv on one model: lower both to XNNPACK, run both through the runtime, compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.export import ExportedProgram

from phaseconv.lowering import lower
from phaseconv.quantize import snr_db
from phaseconv.report import Decision
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import DelegationSummary
from phaseconv.runtimes.timing import interleaved_times, median_ms


@dataclass
class Variant:
    """One lowered program of a model: its summary, its runtime error against eager, its times."""

    name: str
    summary: DelegationSummary
    program: LoadedProgram
    max_abs_error: float = float("nan")
    times: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return median_ms(self.times)


@dataclass
class Comparison:
    decisions: list[Decision]
    reference: list[torch.Tensor]
    variants: dict[str, Variant]

    def speedup(self) -> float:
        return self.variants["stock"].median_ms / self.variants["phaseconv"].median_ms

    def to_dict(self) -> dict:
        return {
            "decisions": [d.to_dict() for d in self.decisions],
            "programs": {
                name: {
                    "median_ms": v.median_ms,
                    "max_abs_error": v.max_abs_error,
                    "runs": len(v.times),
                    "delegation": v.summary.to_dict(),
                }
                for name, v in self.variants.items()
            },
            "speedup": self.speedup(),
        }


def _flat(outputs) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    return [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def lower_stock_and_rewritten(
    ep: ExportedProgram, inputs: tuple[torch.Tensor, ...], target: str = "host"
) -> Comparison:
    """Lower `ep` as phaseconv.lower does for `target` (this machine unless told) and as it is;
    run each once through the runtime."""
    fast = lower(ep, target=target)
    lowered = {"stock": lower(ep, rewrite=False), "phaseconv": fast}
    variants = {name: Variant(name, p.summary, LoadedProgram(p.buffer)) for name, p in lowered.items()}
    return checked_on(Comparison(fast.decisions, [], variants), ep, inputs)


def checked_on(comparison: Comparison, ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> Comparison:
    """The same lowered programs with their errors against eager `ep` on `inputs` (another length of
    a dynamic program); no times yet."""
    with torch.no_grad():
        reference = _flat(ep.module()(*inputs))
    variants = {}
    for name, lowered in comparison.variants.items():
        variant = Variant(name, lowered.summary, lowered.program)
        outputs = variant.program.run(inputs)
        variant.max_abs_error = max(float((o - r).abs().max()) for o, r in zip(outputs, reference, strict=True))
        variants[name] = variant
    return Comparison(comparison.decisions, reference, variants)


def time_variants(comparison: Comparison, inputs: tuple[torch.Tensor, ...], runs: int, on_round=None) -> None:
    runners = {name: (lambda v=v: v.program.run(inputs)) for name, v in comparison.variants.items()}
    for name, samples in interleaved_times(runners, runs, on_round=on_round).items():
        comparison.variants[name].times = samples


def lowered_snr_db(program: ExportedProgram, inputs: tuple, buffer: bytes, data: Path | None = None) -> float:
    """SNR of a lowered int8 program's output against the fp32 `program` in eager, on `inputs`."""
    with torch.no_grad():
        reference = program.module()(*inputs)
    # without the weight cache: another int8 program of the same weights loaded in this process (a
    # notebook, a test) would lend this one its packed weights, scales included (docs/int8.md)
    output = LoadedProgram(buffer, data, weight_cache=False).run(inputs)
    reference = reference[0] if isinstance(reference, (tuple, list)) else reference
    return snr_db(reference, output[0])
