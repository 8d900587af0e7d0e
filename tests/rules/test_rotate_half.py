"""rotate_half: cat(-x[..., h:], x[..., :h]) of a dynamic length becomes x @ R."""

import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.rules.rotate_half import rotation
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, export, run


class Rotary(nn.Module):
    """x * cos + rotate_half(x) * sin, with x from a linear layer (the rotary embedding's shape)."""

    def __init__(self, width=8):
        super().__init__()
        self.project = nn.Linear(width, width)

    def forward(self, x):
        x = self.project(x)
        half = x.shape[-1] // 2
        return x * 0.5 + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * 0.25


def test_rotation_matrix_is_rotate_half():
    x = torch.randn(3, 5, 8)
    rotated = torch.nn.functional.linear(x, rotation(4, torch.float32))
    assert torch.equal(rotated, torch.cat([-x[..., 4:], x[..., :4]], dim=-1))


def test_rotate_half_of_a_dynamic_length_is_one_delegated_matmul_and_exact():
    x = torch.randn(1, 2, 6, 8)
    ep = export(Rotary(), x, dynamic_shapes=({2: Dim("t", min=2, max=32)},))
    rewritten = phaseconv.rewrite(ep)
    assert not any(n.target == torch.ops.aten.cat.default for n in rewritten.graph.nodes)
    buffer = to_xnnpack(rewritten).buffer
    summary = summarize_pte(buffer)
    assert summary.partitions == 1 and not summary.outside, summary
    program = LoadedProgram(buffer)
    for length in (2, 11, 32):
        longer = torch.randn(1, 2, length, 8)
        (out,) = program.run((longer,))
        assert_close(out, run(ep, longer))


def test_static_rotate_half_is_left_to_xnnpack():
    decisions = phaseconv.explain(export(Rotary(), torch.randn(1, 2, 6, 8)))
    (decision,) = [d for d in decisions if d.rule == "rotate_half"]
    assert not decision.applied and "static shape" in decision.reason
