"""XNNPACK's backend options set through ExecuTorch's C++ set_option, and the weight cache they turn on."""

import gc
import subprocess
import sys

import pytest
import torch

from phaseconv.errors import PhaseconvError
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.backend_options import WEIGHT_CACHE, set_xnnpack_option, xnnpack_option
from phaseconv.runtimes.executorch import LoadedProgram
from tests.helpers import assert_close, export, run

STEPS, HIDDEN = 24, 256  # a [4H, H] weight: 1 MiB, read by every step


class SharedWeightSteps(torch.nn.Module):
    """An unrolled recurrence: every step's linear layer reads the same weight."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4 * HIDDEN, HIDDEN) / HIDDEN**0.5)

    def forward(self, h):
        outputs = []
        for _ in range(STEPS):
            gates = torch.nn.functional.linear(h, self.weight)
            h = torch.tanh(gates[:, :HIDDEN]) * torch.sigmoid(gates[:, HIDDEN : 2 * HIDDEN])
            outputs.append(h)
        return torch.cat(outputs)


@pytest.fixture(scope="module")
def program():
    x = torch.randn(1, HIDDEN)
    ep = export(SharedWeightSteps(), x)
    return to_xnnpack(ep).buffer, x, run(ep, x)


# Loads a program file in a fresh interpreter (whose allocator has no freed memory to reuse) and
# prints how much resident memory the load kept, in MiB.
LOAD_AND_MEASURE = """
import sys
from pathlib import Path
from phaseconv.runtimes.executorch import LoadedProgram
def resident():
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20
buffer = Path(sys.argv[1]).read_bytes()
before = resident()
program = LoadedProgram(buffer, weight_cache=sys.argv[2] == "on")
print(resident() - before)
"""


def _kept_by_load(path, weight_cache: str) -> float:
    result = subprocess.run([sys.executable, "-c", LOAD_AND_MEASURE, str(path), weight_cache], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return float(result.stdout.decode().split()[-1])


def test_options_read_back_what_was_set_and_apply_per_load():
    before = xnnpack_option(WEIGHT_CACHE)
    try:
        for value in (True, False):
            set_xnnpack_option(WEIGHT_CACHE, value)
            assert xnnpack_option(WEIGHT_CACHE) is value
    finally:
        set_xnnpack_option(WEIGHT_CACHE, before)
    assert isinstance(xnnpack_option("workspace_sharing_mode"), int)


def test_a_refused_value_says_which_option():
    with pytest.raises(PhaseconvError, match="workspace_sharing_mode=99"):
        set_xnnpack_option("workspace_sharing_mode", 99)


@pytest.mark.slow  # 24 s: two loads of a program with and without the cache
def test_the_weight_cache_packs_a_shared_weight_once_and_stays_exact(program, tmp_path):
    buffer, x, expected = program
    (tmp_path / "steps.pte").write_bytes(buffer)
    # one packed copy per step (24 MiB) against one for all of them
    assert _kept_by_load(tmp_path / "steps.pte", "off") > STEPS * 0.75
    assert _kept_by_load(tmp_path / "steps.pte", "on") < 4
    assert_close(LoadedProgram(buffer, weight_cache=False).run((x,))[0], expected)
    assert_close(LoadedProgram(buffer, weight_cache=True).run((x,))[0], expected)


def test_a_program_sharing_packed_weights_outlives_the_other(program):
    buffer, x, expected = program
    first, second = LoadedProgram(buffer), LoadedProgram(buffer)
    del first
    gc.collect()
    assert_close(second.run((x,))[0], expected)
    third = LoadedProgram(buffer)
    assert_close(third.run((x,))[0], expected)


def test_the_summary_counts_the_copies_a_load_without_the_cache_packs(program):
    from phaseconv.runtimes.pte import summarize_pte

    summary = summarize_pte(program[0])
    assert summary.inside["XNNFullyConnected"] == STEPS
    assert (summary.repacked_weights, summary.repacked_bytes) == (STEPS - 1, (STEPS - 1) * 4 * HIDDEN * HIDDEN * 4)


class SharedWeightStepsAndHead(SharedWeightSteps):
    """The recurrence, then a linear layer of its own weight over every step's output."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(HIDDEN, 8)

    def forward(self, h):
        return self.head(super().forward(h))


@pytest.fixture(scope="module")
def lean_program():
    """SharedWeightStepsAndHead lowered for a loader without the weight cache."""
    x = torch.randn(1, HIDDEN)
    ep = export(SharedWeightStepsAndHead(), x)
    return to_xnnpack(ep, weight_cache=False).buffer, x, run(ep, x)


def test_lowered_for_no_weight_cache_a_shared_weight_comes_at_run_time_and_stays_exact(lean_program):
    from phaseconv.runtimes.pte import summarize_pte

    buffer, x, expected = lean_program
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    assert summary.inside["XNNFullyConnected"] == STEPS + 1
    # the steps' weight is a delegate input, the head's (read once) a constant packed at load
    assert (summary.run_time_weights, summary.repacked_weights, summary.repacked_bytes) == (STEPS, 0, 0)
    assert_close(LoadedProgram(buffer, weight_cache=False).run((x,))[0], expected)
    assert_close(LoadedProgram(buffer, weight_cache=True).run((x,))[0], expected)


@pytest.mark.slow  # 12 s: a load in a fresh interpreter
def test_lowered_for_no_weight_cache_a_load_without_the_cache_packs_nothing_per_step(lean_program, tmp_path):
    (tmp_path / "lean.pte").write_bytes(lean_program[0])
    assert _kept_by_load(tmp_path / "lean.pte", "off") < 4  # the stock lowering: > 18 MiB (above)
