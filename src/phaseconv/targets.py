"""The CPU a lowered program is for: what phaseconv.lower may tune to it.

- "any": the rewrites that paid on every CPU measured (the default: a program lowered on a
  workstation usually ships to another CPU, a phone's);
- "x86-fma3": also `winograd` and `im2col`, for x86-64 CPUs with FMA3 and no AVX-512, where
  XNNPACK's f32 IGEMM convolution runs at about half its GEMM speed (rules/im2col.py): the
  convolutions become GEMMs;
- "x86-avx512": also `winograd` for stride-1 3x3 (and 2x2) convolutions of 128 channels or more in
  and out, for x86-64 CPUs with AVX-512, where XNNPACK's IGEMM convolution runs at about 92 GMAC/s
  (an Intel Xeon, 1 thread; torch.mm 98 there): F(2, 3x3)'s 16 GEMMs of a quarter of the positions
  for 9 paid there (1 thread: the U-Net 26.9 -> 24.6 ms, the StyleGAN2-like network 24.9 -> 22.5);
  at 64 channels, or with strided and 1-D kernels too, they did not; beyond 128x128 outputs only
  from 256 channels in and out: SD 1.x's VAE decoder at 32x32 latents ran 5646 ms with its
  128-channel layers at 256x256 taken too, 5434 without (`python benchmarks/variants.py --only "SD 1.x"`);
  and `transposed_linear`, linear layers of 8-128 rows with their weight first (XNNPACK tiles the
  rows by 7 and reads the weight once per tile: rules/transposed_linear.py), measured on an Intel Xeon;
- "x86-avx512-amd": x86-avx512's Winograd without its weight-first linears, for AMD CPUs with
  AVX-512. Measured on a Zen 5 (EPYC, family 26; not on a Zen 4), 1 thread, x86-avx512 / this
  (`python benchmarks/variants.py --only "(transposed_linear)"` and `--only "(x86-avx512)"`,
  results/variants.json): XNNPACK's run-time-weight fully connected operator streams its input at
  13.4 GB/s there whatever the rows (`operators.py --rows`: 16 rows of 67 MB, 5.02 ms weight first,
  4.28 as stored), so pocket-tts's decoder step ran 5.57 -> 4.83 ms, Mimi's decoder on 25 frames
  60.6 -> 54.4, EnCodec's 23.0 -> 21.0, but Mimi's on 1 frame 6.63 -> 6.87 (the others within 1%);
  Winograd pays as on the Xeon (U-Net 19.6 -> 17.6 ms for any -> x86-avx512, the StyleGAN2-like
  network 17.2 -> 15.2);
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
