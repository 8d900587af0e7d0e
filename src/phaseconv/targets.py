"""The CPU a lowered program is for: what phaseconv.lower may tune to it.

- "any": the rewrites that paid on every CPU measured (the default: a program lowered on a
  workstation usually ships to another CPU, a phone's);
- "x86-fma3": also `winograd` and `im2col`, for x86-64 CPUs with FMA3 and no AVX-512, where
  XNNPACK's f32 IGEMM convolution runs at about half its GEMM speed (rules/im2col.py): the
  convolutions become GEMMs;
- "host": the CPU this runs on, as one of the above (what the benchmarks and `phaseconv bench` use).
"""

from __future__ import annotations

import platform

from phaseconv.errors import PhaseconvError

TARGETS = ("any", "x86-fma3", "host")


def host_target() -> str:
    """x86-fma3 on an x86-64 CPU whose best vector unit is AVX2 (it implies FMA3 there), else any."""
    import torch

    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return "x86-fma3" if x86 and torch.backends.cpu.get_cpu_capability() == "AVX2" else "any"


def resolve_target(target: str) -> str:
    """`target` as "any" or "x86-fma3" ("host" resolved); a clear error for anything else."""
    if target not in TARGETS:
        raise PhaseconvError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return host_target() if target == "host" else target
