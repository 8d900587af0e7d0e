"""Rewritten programs through the real ExecuTorch runtime (XNNPACK delegate), against eager."""

import io
import math

import pytest
import torch

import phaseconv
from phaseconv.models.audio import seanet_decoder
from tests.helpers import EXHAUSTIVE, assert_close, decisions_of, export, lower_and_run, run, transposed_convs
from tests.rules.test_conv_transpose import CausalUpsampler, OverlapAdd, TwoDeconvsWithElu, make_case

TRANSPOSED = "XNNConvTranspose2d"  # XNNPACK runs 1-D deconvolutions as 2-D ones too


@pytest.mark.parametrize(
    "name",
    [
        "mimi-k16-s8",
        "dac-k16-s8-p4",
        "kernel-not-multiple",
        "output-padding-over-padding",
        "dilation",
        "length-1",
        "2d-k4-s2-p1",
        "2d-unequal",
        "2d-k2-s2-unet",
        "grouped-g2",
        "depthwise-mimi-k4-s2",
        "depthwise-multiplier-2",
        "2d-depthwise-migan-k4-s2",
        "2d-grouped-unequal",
    ],
)
def test_lowered_rewrite_matches_eager_with_no_deconvolution_in_the_delegate(name):
    module, x = make_case(name)
    ep = export(module, x)
    rewritten = phaseconv.rewrite(ep, EXHAUSTIVE)
    assert transposed_convs(rewritten) == []
    summary, (out,) = lower_and_run(rewritten, x)
    assert summary.partitions == 1 and not summary.outside, summary
    phases = 1 if module.groups != module.in_channels else math.prod(module.stride)
    convs = summary.inside["XNNConv2d"] + summary.inside["XNNDepthwiseConv2d"]
    assert summary.inside[TRANSPOSED] == 0 and convs == phases
    assert_close(out, run(ep, x))


def test_stock_lowering_keeps_the_deconvolution_in_the_delegate():
    """The summary tells the two apart: without the rewrite XNNPACK runs a deconvolution."""
    module, x = make_case("mimi-k16-s8")
    summary, (out,) = lower_and_run(export(module, x), x)
    assert summary.inside[TRANSPOSED] == 1


def test_fp16_through_the_runtime():
    module, x = make_case("2d-k4-s2-p1", dtype=torch.float16)
    ep = export(module, x)
    summary, (out,) = lower_and_run(phaseconv.rewrite(ep), x)
    assert summary.inside[TRANSPOSED] == 0
    assert_close(out, run(ep, x))


def test_deconvolutions_with_an_elu_between():
    module, x = TwoDeconvsWithElu(), torch.randn(1, 8, 6)
    ep = export(module, x)
    summary, (out,) = lower_and_run(phaseconv.rewrite(ep), x)
    assert summary.inside[TRANSPOSED] == 0
    assert_close(out, run(ep, x))


def test_streaming_overlap_add_from_a_serialized_program():
    """Export, save, load (as a user gets a .pt2), rewrite; the bias also feeds the overlap-add."""
    x, tail = torch.randn(1, 6, 5), torch.randn(1, 4, 4)
    buffer = io.BytesIO()
    torch.export.save(export(OverlapAdd(), x, tail), buffer)
    buffer.seek(0)
    ep = torch.export.load(buffer)
    summary, outputs = lower_and_run(phaseconv.rewrite(ep), x, tail)
    assert summary.inside[TRANSPOSED] == 0
    for actual, expected in zip(outputs, run(ep, x, tail)):
        assert_close(actual, expected)


def test_causal_upsampler_chain_in_a_decoder():
    module, (latents,) = seanet_decoder(frames=2, latent=32, channels=64)
    ep = export(module, latents)
    rewritten = phaseconv.rewrite(ep)
    assert transposed_convs(rewritten) == [], phaseconv.explain(ep)
    summary, (audio,) = lower_and_run(rewritten, latents)
    assert summary.partitions == 1 and not summary.outside, "ELUs rewritten too: one partition"
    assert summary.inside[TRANSPOSED] == 0
    assert audio.shape == (1, 1, 2 * 960)
    assert_close(audio, run(ep, latents))
    assert float((audio - run(ep, latents)).abs().max()) * 32768 < 1, "within one 16-bit PCM step"


def test_causal_upsampler_single_frame():
    module, x = CausalUpsampler(), torch.randn(1, 6, 1)
    ep = export(module, x)
    (decision,) = decisions_of("conv_transpose", ep)
    assert decision.applied, "a trimmed single step reads no padding-only block"
    summary, (out,) = lower_and_run(phaseconv.rewrite(ep), x)
    assert_close(out, run(ep, x))


class SharedConstant(torch.nn.Module):
    """Two linears reading one tensor constant (as phaseconv's layer-norm averages are)."""

    def __init__(self):
        super().__init__()
        self.w = torch.randn(16, 16)

    def forward(self, x):
        return torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, self.w)), self.w)


def test_lowering_leaves_the_program_as_it_was():
    """The stock lowering takes such a constant out of the program it is given; phaseconv lowers a
    copy, so the same program lowers again, stock or rewritten, and runs alike."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram

    x = torch.randn(4, 16)
    ep = export(SharedConstant(), x)
    first = LoadedProgram(to_xnnpack(ep).buffer).run((x,))[0]
    second = LoadedProgram(to_xnnpack(ep).buffer).run((x,))[0]
    assert torch.equal(first, second)
    phaseconv.lower(ep, rewrite=False)
    (out,) = LoadedProgram(phaseconv.lower(ep).buffer).run((x,))
    assert_close(out, run(ep, x))


class Accumulate(torch.nn.Module):
    """A state that one method adds to and another puts back to its start."""

    def __init__(self, size: int):
        super().__init__()
        self.register_buffer("state", torch.full((size,), 7.0))

    def forward(self, x):
        total = self.state + x
        self.state.copy_(total)
        return total


class Restart(Accumulate):
    def forward(self):
        self.state.copy_(torch.full_like(self.state, 7.0))
        return torch.zeros(1)


def test_methods_that_share_a_state_start_from_its_value_held_once_in_the_file():
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram

    size, x = 250_000, torch.ones(250_000)
    one = to_xnnpack(export(Accumulate(size), x)).buffer
    both = to_xnnpack({"add": export(Accumulate(size), x), "restart": export(Restart(size))}).buffer
    assert len(both) < len(one) + size * 4 / 2  # one initial value (1 MB), not one per method
    program = LoadedProgram(both)
    assert torch.equal(program.run((x,), "add")[0], torch.full((size,), 8.0))
    assert torch.equal(program.run((x,), "add")[0], torch.full((size,), 9.0))
    program.run((), "restart")
    assert torch.equal(program.run((x,), "add")[0], torch.full((size,), 8.0))


def test_a_program_loaded_from_its_file_runs_as_from_its_bytes(tmp_path):
    """A path is mapped (the runtime lets go of what it has packed), bytes are held: the same program."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram

    x = torch.ones(8)
    path = tmp_path / "accumulate.pte"
    path.write_bytes(to_xnnpack({"add": export(Accumulate(8), x), "restart": export(Restart(8))}).buffer)
    from_file, from_bytes = LoadedProgram(path), LoadedProgram(path.read_bytes())
    for program in (from_file, from_bytes):
        assert torch.equal(program.run((x,), "add")[0], torch.full((8,), 8.0))
        assert torch.equal(program.run((x,), "add")[0], torch.full((8,), 9.0))
        program.run((), "restart")
        assert torch.equal(program.run((x,), "add")[0], torch.full((8,), 8.0))


class WriteAt(torch.nn.Module):
    """A cache written at a position, in place, as a KV cache is (index_copy_)."""

    def __init__(self, size: int):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, size))

    def forward(self, x, position):
        self.cache.index_copy_(1, position, x)
        return self.cache.sum(1)


class StartOver(WriteAt):
    def __init__(self, size: int):
        super().__init__(size)
        self.start = torch.zeros(4, size)  # a constant of the same bytes as the buffer's initial value

    def forward(self):
        self.cache.copy_(self.start)
        return torch.zeros(1)


def test_a_method_that_writes_its_state_plans_no_second_copy_of_it():
    """A write in place into a buffer is planned where the buffer lies: the methods' own memory (the
    planned arena beside the shared state) holds their temporaries only, not a copy of the cache.
    The reset's constant, the same bytes as the buffer's initial value, is emitted first (by name)."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram

    size, x = 50_000, torch.ones(4, 1)
    manager = to_xnnpack({"write": export(WriteAt(size), x, torch.tensor([0])), "start_over": export(StartOver(size))})
    for plan in manager.executorch_program.execution_plan:
        assert plan.non_const_buffer_sizes[1] < 4 * size * 4 / 10, plan.name
    program = LoadedProgram(manager.buffer)
    for position, total in [(3, 1.0), (9, 2.0), (3, 2.0)]:
        assert torch.equal(program.run((x, torch.tensor([position])), "write")[0], torch.full((4,), total))
    program.run((), "start_over")
    assert torch.equal(program.run((x, torch.tensor([0])), "write")[0], torch.ones(4))


def test_the_planned_memory_read_from_a_file_holds_the_shared_state_once():
    """planned_bytes: the state two methods share counted once, their own temporaries apart."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.pte import planned_bytes

    size, x = 50_000, torch.ones(4, 1)
    manager = to_xnnpack({"write": export(WriteAt(size), x, torch.tensor([0])), "start_over": export(StartOver(size))})
    methods, state = planned_bytes(manager.buffer)
    assert state == 4 * size * 4  # the cache, float32
    assert 0 < methods < 4 * size * 4 / 10


class ReadZeros(torch.nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.zeros = torch.zeros(4, size)  # a constant, read by a portable operator

    def forward(self, x):
        return torch.cumsum(self.zeros, 1)[:, -1] + x


def test_a_buffer_keeps_its_initial_value_beside_a_constant_of_the_same_bytes():
    """ExecuTorch's emitter looks a named buffer's initial value up among the constants emitted before
    it: the method that holds the value failed to load. Lowering gives the buffer its own value."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram

    size, x = 50_000, torch.ones(4, 1)
    methods = {"a_reader": export(ReadZeros(size), torch.ones(4)), "write": export(WriteAt(size), x, torch.tensor([0]))}
    program = LoadedProgram(to_xnnpack(methods).buffer)
    assert torch.equal(program.run((x, torch.tensor([3])), "write")[0], torch.ones(4))
    assert torch.equal(program.run((torch.ones(4),), "a_reader")[0], torch.ones(4))
