"""How much memory lowering a text-to-speech program takes: said before the work, and checked against
what the machine has.

At its peak the command holds its libraries, the model's weights once (its workers map the main
process's), and in each worker one method's lowering, which for a language-model method grows with
that model (its weights and layers). Fitted to what benchmarks/lowering.py measured (all the
command's processes, proportional set size) as the least over-estimate that stays a tenth above
every measured peak (a linear program; base and weights held at least once), which
tests/tts/test_footprint.py holds to the results file:

    peak MiB = BASE + PER_WEIGHT * weights MiB + workers * (PER_WORKER + PER_LANGUAGE_MODEL * its weights MiB)

A quantized language model holds less than its fp32 weights: the estimate is then an upper bound.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from torch import nn

from phaseconv.errors import PhaseconvError

BASE, PER_WEIGHT, PER_WORKER, PER_LANGUAGE_MODEL = 600.0, 1.0, 590.0, 2.2
MIB = 2**20


def _mib(module: nn.Module) -> float:
    return sum(p.numel() * p.element_size() for p in module.parameters()) / MIB


@dataclass(frozen=True)
class Footprint:
    """What lowering a model's program holds, from its weights (MiB): all of them, the language model's."""

    weights_mib: float
    language_model_mib: float

    @classmethod
    def of(cls, tts: nn.Module) -> Footprint:
        """The footprint of pocket-tts's TTSModel's program."""
        return cls(_mib(tts), _mib(tts.flow_lm))

    def to_dict(self, workers: int) -> dict:
        return {**asdict(self), "workers": workers, "expected_peak_mib": self.peak_mib(workers)}

    def peak_mib(self, workers: int) -> float:
        worker = PER_WORKER + PER_LANGUAGE_MODEL * self.language_model_mib
        return BASE + PER_WEIGHT * self.weights_mib + workers * worker


def available_mib() -> float | None:
    """Memory the system can give without swapping (MemAvailable); None where it does not say."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    kib = next((int(line.split()[1]) for line in lines if line.startswith("MemAvailable:")), None)
    return None if kib is None else kib / 1024


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def memory_check(config: str, footprint: Footprint, workers: int) -> str:
    """The line that says what lowering `config` with `workers` workers will hold; PhaseconvError when
    the machine clearly has too little, naming the flag that lowers with less."""
    needed, available = footprint.peak_mib(workers), available_mib()
    said = f"{config}: lowering with {workers} worker{'s' if workers > 1 else ''} takes about {_gib(needed)}"
    if available is None:
        return said
    said += f" at its peak ({_gib(available)} available)"
    if needed <= available:
        return said
    if workers > 1 and footprint.peak_mib(1) <= available:
        raise PhaseconvError(
            f"{said}: lower with --workers 1 (about {_gib(footprint.peak_mib(1))}, and slower), or free memory"
        )
    raise PhaseconvError(f"{said}, even with --workers 1 ({_gib(footprint.peak_mib(1))}): free memory first")
