"""XNNPACK's passes as phaseconv runs them: a pass that changed nothing does not retrace the graph,
and the program is the same, byte for byte."""

import contextlib
from unittest import mock

import pytest
import torch

import phaseconv
from phaseconv.lowering import passes
from phaseconv.models import DEMO_MODELS
from phaseconv.rules import LOWERING_RULES
from tests.helpers import export
from tests.lowering.test_layout import Attention, Upsampler1d


def int8_upsampler():
    from phaseconv.quantize import quantize

    torch.manual_seed(0)
    calibration = [(torch.randn(1, 16, 40),) for _ in range(4)]
    return quantize(Upsampler1d().eval(), calibration), calibration[0]


def demo(name):
    module, inputs = DEMO_MODELS[name]()
    return export(module, *inputs), inputs


CASES = {
    "mimi-like decoder": lambda: demo("mimi-decoder"),
    "MI-GAN-like generator (2-D, nearest, depthwise)": lambda: demo("migan"),
    "attention": lambda: (export(Attention(), torch.randn(1, 20, 32)), (torch.randn(1, 20, 32),)),
    "int8 upsampler": int8_upsampler,
}


@pytest.mark.parametrize("name", CASES)
def test_a_pass_that_changed_nothing_skips_its_retrace_and_the_program_is_the_same(name):
    from phaseconv.lowering.xnnpack import PHASECONV_LOWERING, to_xnnpack

    program, _ = CASES[name]()
    rewritten = phaseconv.rewrite(program, LOWERING_RULES)
    retraced = []
    original = passes.ExportPass.call

    def counted(self, graph_module):
        retraced.append(type(self).__name__)
        return original(self, graph_module)

    buffers, retraces = {}, {}
    for skipping in (False, True):  # the first lowering in a process retraces more (set-up): the full one first
        retraced.clear()
        every_pass_retraces = mock.patch.object(passes, "_retracing_when_changed", lambda pass_class: pass_class)
        with mock.patch.object(passes.ExportPass, "call", counted), contextlib.ExitStack() as stack:
            if not skipping:
                stack.enter_context(every_pass_retraces)
            buffers[skipping] = to_xnnpack(rewritten, **PHASECONV_LOWERING).buffer
        retraces[skipping] = len(retraced)
    assert buffers[True] == buffers[False]
    assert retraces[True] < retraces[False]


class StackedHeads(torch.nn.Module):
    """Heads [t, 3, 8] laid end to end, as attention stacks a query group: to_edge writes the
    reshape as a view of size [1, 3 * t, 8], with 3 * t read from the graph."""

    def forward(self, x):
        return torch.relu(x.permute(1, 0, 2).reshape(1, 3 * x.shape[0], 8)) + 1


def test_a_view_of_one_symbolic_size_is_inferred_and_stays_in_the_delegate():
    from torch.export import Dim

    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import summarize_pte

    module = StackedHeads()
    ep = torch.export.export(module, (torch.randn(5, 3, 8),), dynamic_shapes=({0: Dim("t", min=1, max=32)},))
    buffer = to_xnnpack(ep).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and summary.inside["XNNStaticReshape"] == 1, summary
    program = LoadedProgram(buffer)
    for length in (1, 7, 32):
        x = torch.randn(length, 3, 8)
        torch.testing.assert_close(program.run((x,))[0], module(x), rtol=0, atol=0)
