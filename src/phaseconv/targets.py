"""The CPU a lowered program is for: what phaseconv.lower may tune to it (the rule sets per target
are in rules/sets.py; what each gained, per CPU, in docs/runtimes.md#the-target-cpu, from
`python benchmarks/variants.py`).

- "any": the rewrites that paid on every CPU measured (the default: a program lowered on a
  workstation usually ships to another CPU, a phone's);
- "x86-fma3": x86-64 CPUs with FMA3 and no AVX-512, where XNNPACK's f32 convolution runs at about
  half its GEMM speed: convolutions as GEMMs too (winograd, im2col);
- "x86-avx512": x86-64 CPUs with AVX-512: wide stride-1 3x3 convolutions as Winograd's GEMMs, and
  linears of 8 to 128 rows with their weight first (XNNPACK reads a weight once per 7-row tile);
- "x86-avx512-amd": AMD CPUs with AVX-512 (a Zen 5): Winograd, without the weight-first linears
  (there XNNPACK's run-time-weight linear streams its input no faster for fewer rows);
- "host": the CPU this runs on, as one of the above (what the benchmarks and `phaseconv bench` use).
"""

from __future__ import annotations

import platform
from pathlib import Path

from phaseconv.errors import PhaseconvError

TARGETS = ("any", "x86-fma3", "x86-avx512", "x86-avx512-amd", "host")


def cpuinfo() -> str:
    """/proc/cpuinfo's text on Linux; "" where there is none or it cannot be read."""
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


def cpu_vendor() -> str:
    """The x86 vendor string ("GenuineIntel", "AuthenticAMD"), from /proc/cpuinfo on Linux and the
    processor name elsewhere; "" when neither says."""
    text = cpuinfo() or platform.processor()
    return next((vendor for vendor in ("GenuineIntel", "AuthenticAMD") if vendor in text), "")


def host_target() -> str:
    """On an x86-64 CPU, x86-fma3 where its best vector unit is AVX2 (it implies FMA3 there) and
    x86-avx512 where it is AVX-512 (x86-avx512-amd on an AMD one); else any."""
    import torch

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return "any"
    capability = torch.backends.cpu.get_cpu_capability()
    if capability == "AVX512" and cpu_vendor() == "AuthenticAMD":
        return "x86-avx512-amd"
    return {"AVX2": "x86-fma3", "AVX512": "x86-avx512"}.get(capability, "any")


def resolve_target(target: str) -> str:
    """`target` as one of TARGETS but "host" (resolved); a clear error for anything else."""
    if target not in TARGETS:
        raise PhaseconvError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return host_target() if target == "host" else target
