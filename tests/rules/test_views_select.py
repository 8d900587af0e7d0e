"""select / unbind -> slice + view and a same-shaped functional copy -> its source: delegated."""

import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, export, run

aten = torch.ops.aten


class RealImaginary(nn.Module):
    """RoPE's split of pairs into real and imaginary parts, and an unbind of stacked keys and values."""

    def forward(self, x):
        pairs = x.view(1, 4, 3, 2)
        real, imaginary = pairs[..., 0], pairs[..., 1]
        k, v = torch.unbind(x.view(1, 2, 2, 6), dim=1)
        return torch.stack([real * 2 - imaginary, imaginary * 3 + real], dim=-1).view(1, 24) + torch.cat(
            [k, v], 1
        ).view(1, 24)


def test_select_and_unbind_become_slices_in_one_partition():
    x = torch.randn(1, 24)
    ep = export(RealImaginary(), x)
    rewritten = phaseconv.rewrite(ep)
    targets = {n.target for n in rewritten.graph.nodes}
    assert aten.select.int not in targets and aten.unbind.int not in targets
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


class StateWrite(nn.Module):
    """`state[:] = x`: a functional copy into the buffer's shape, then the buffer write-back."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(1, 3, 4))

    def forward(self, x):
        y = torch.cat([self.state, x], dim=-1)
        self.state[:] = y[..., -4:] * 2
        return y


def test_state_write_copy_is_its_source_and_state_carries_over():
    x = torch.randn(1, 3, 4)
    ep = export(StateWrite(), x)
    rewritten = phaseconv.rewrite(ep)
    assert aten.copy.default not in {n.target for n in rewritten.graph.nodes}
    assert len(rewritten.graph_signature.buffers_to_mutate) == 1
    eager, program = StateWrite(), rewritten.module()
    for _ in range(3):  # the state each call leaves is what the next one reads
        assert_close(program(x), eager(x))


def test_broadcasting_copy_is_declined():
    class Broadcast(nn.Module):
        def forward(self, x, row):
            return torch.ops.aten.copy.default(x, row)

    ep = export(Broadcast(), torch.randn(2, 3), torch.randn(3))
    (decision,) = [d for d in phaseconv.explain(ep) if d.node.startswith("copy")]
    assert not decision.applied and "broadcasts" in decision.reason


class AdaptiveNorm(nn.Module):
    """An adaptive layer norm's modulation: `chunk` into shift, scale and gate (a split)."""

    def forward(self, x, y):
        shift, scale, gate = (y * 2).chunk(3, dim=-1)
        first, rest = torch.split(x, [2, 6], dim=-1)
        return torch.cat([first, rest * (1 + scale[..., :6]) + shift[..., :6]], dim=-1) * gate[..., :8]


def test_split_becomes_one_slice_per_piece_in_one_partition():
    x, y = torch.randn(1, 3, 8), torch.randn(1, 3, 24)
    ep = export(AdaptiveNorm(), x, y)
    rewritten = phaseconv.rewrite(ep)
    targets = {n.target for n in rewritten.graph.nodes}
    assert not {aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default} & targets
    assert_close(run(rewritten, x, y), run(ep, x, y))
    assert_one_partition_matching(rewritten, ep, x, y)


def test_split_read_as_a_tuple_is_declined():
    class Whole(nn.Module):
        def forward(self, x):
            return torch.cat(torch.split(x, 2, dim=-1)[::-1], dim=-1)

    ep = export(Whole(), torch.randn(1, 6))
    decisions = [d for d in phaseconv.explain(ep) if d.rule == "views" and d.node.startswith("split")]
    assert decisions and all(d.applied or "tuple is read as a whole" in d.reason for d in decisions)
