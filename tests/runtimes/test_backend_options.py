"""XNNPACK's backend options set through ExecuTorch's C++ set_option, and the weight cache they turn on."""

import gc

import pytest
import torch

from phaseconv.errors import PhaseconvError
from phaseconv.runtimes.backend_options import WEIGHT_CACHE, set_xnnpack_option, xnnpack_option
from phaseconv.runtimes.executorch import LoadedProgram, to_xnnpack
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


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


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


def test_the_weight_cache_packs_a_shared_weight_once_and_stays_exact(program):
    buffer, x, expected = program
    gc.collect()
    start = _resident_mib()
    private = LoadedProgram(buffer, weight_cache=False)
    private_growth = _resident_mib() - start
    shared = LoadedProgram(buffer, weight_cache=True)
    shared_growth = _resident_mib() - start - private_growth
    # one packed copy per step (24 MiB) against one for all of them
    assert private_growth > STEPS * 0.75
    assert shared_growth < 4
    assert_close(private.run((x,))[0], expected)
    assert_close(shared.run((x,))[0], expected)


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
