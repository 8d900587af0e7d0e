"""The runner on ARM64: programs lowered here (x86) spoken by the runner cross-built against the
aarch64 ExecuTorch wheel (`./dev runner --arch aarch64`), under qemu-aarch64 as a Neoverse N1 (the
Cortex-A76 class of a phone's big cores: NEON and the dot product), against the x86 build.

ARM64 runs other XNNPACK kernels: they sum in another order, and for int8 they quantize activations
with their own rounding, so the audio cannot be equal bit for bit. The bounds:
- the same length, always: the end of speech is put at the first frame it may come (threshold out
  of reach below), then a fixed number of frames, so each run speaks the same frames whatever the logits;
- fp32: within BOUND_FP32_LSB steps of 16-bit PCM at every sample. Summation order moves a float32
  result by a few units in its last place, far below one step of 16-bit PCM; the x86 C++ and Python
  runners differ by at most one step, and so may the two builds;
- 8da4w language model and int8 decoder: each build's audio is the fp32 program's plus its own
  quantization noise. Two independent noises of the power the x86 build has against fp32 (what a
  user of the quantized program accepts) differ by twice that power, 3 dB less signal-to-noise; the
  bound allows 3 dB more: SNR(x86, ARM64) >= SNR(x86 fp32, x86 quantized) - 6 dB.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

from phaseconv.tts.build import lower_tts
from tests.cli.test_cli import ROOT
from tests.tts.programs import CAPACITY, runner_model, runner_program

pytest.importorskip("pocket_tts")

X86 = ROOT / "runner" / "build" / "phaseconv-tts"
ARM64 = ROOT / "runner" / "build-aarch64" / "phaseconv-tts"
CONFIG = "english_18m_2026-10"  # the smallest config whose language model 8da4w takes (group size)
BOUND_FP32_LSB = 2
BOUND_QUANTIZED_DB = 6.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built():
    assert X86.is_file(), "build the C++ runner first: ./dev runner"
    assert ARM64.is_file(), "cross-build the ARM64 runner first: ./dev runner --arch aarch64"
    assert shutil.which("qemu-aarch64"), "qemu-aarch64 runs the ARM64 build: Debian's qemu-user"


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The config's program in fp32 (the C++ runner tests' own) and with an 8da4w language model and an
    int8 decoder, the same random weights and built-in voice in both."""
    fp32 = runner_program(tmp_path_factory, CONFIG) / "tts.pte"
    folder = tmp_path_factory.mktemp("arm64")
    model = runner_model(CONFIG, folder)
    lowered, _ = lower_tts(model, capacity=CAPACITY, quantize="8da4w", quantize_decoder="int8")
    return {"fp32": fp32, "quantized": lowered.save(folder / "quantized.pte")[0]}


def speak(command: list, program, environment=None) -> np.ndarray:
    arguments = [str(program), "Hi there.", "--temperature", "0", "--eos-threshold", "-1e30"]
    arguments += ["--frames-after-eos", "6", "--stream"]
    result = subprocess.run(command + arguments, capture_output=True, timeout=900, env=environment)
    assert result.returncode == 0, result.stderr.decode()
    return np.frombuffer(result.stdout, dtype="<i2").astype(np.float64)


def on_arm64(program, cpu="neoverse-n1") -> np.ndarray:
    """With the multiarch arm64 runtime alone (no -L: a loader from the cross sysroot beside
    libc6:arm64's libc is two glibc builds, and pthread_create then never returns)."""
    return speak(["qemu-aarch64", "-cpu", cpu, str(ARM64)], program, {**os.environ})


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = np.sum((reference - other) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(reference**2) / noise))


def test_the_arm64_build_is_an_arm64_program(built):
    kind = subprocess.run(["file", "-L", str(ARM64)], capture_output=True, text=True).stdout
    assert "ARM aarch64" in kind, kind


def test_arm64_speaks_the_fp32_program_as_x86_does(built, programs):
    x86, arm64 = speak([str(X86)], programs["fp32"]), on_arm64(programs["fp32"])
    assert arm64.size == x86.size and np.abs(x86).max() > 100
    assert np.abs(arm64 - x86).max() <= BOUND_FP32_LSB


def test_arm64_speaks_the_quantized_program_as_x86_does(built, programs):
    x86_fp32, x86 = speak([str(X86)], programs["fp32"]), speak([str(X86)], programs["quantized"])
    arm64 = on_arm64(programs["quantized"])
    assert arm64.size == x86.size == x86_fp32.size and np.abs(x86).max() > 100
    quantization = snr_db(x86_fp32, x86)
    assert snr_db(x86, arm64) >= quantization - BOUND_QUANTIZED_DB, (snr_db(x86, arm64), quantization)


@pytest.mark.xfail(strict=True, reason="qemu 7.2 (Debian bookworm) with SME: the quantized audio is not x86's")
def test_arm64_with_sme_speaks_the_quantized_program_as_x86_does(built, programs):
    """qemu's `max` CPU (SVE2, SME, i8mm): XNNPACK takes its SME kernels, and the audio differs from
    x86's by far more than quantization (with `max,sme=off` it is within the bound). Whether the
    emulator or the kernels are at fault takes SME hardware or a newer qemu to tell."""
    x86_fp32, x86 = speak([str(X86)], programs["fp32"]), speak([str(X86)], programs["quantized"])
    arm64 = on_arm64(programs["quantized"], cpu="max")
    assert snr_db(x86, arm64) >= snr_db(x86_fp32, x86) - BOUND_QUANTIZED_DB
