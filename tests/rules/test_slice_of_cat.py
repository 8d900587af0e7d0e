"""slice of a cat -> the pieces it covers (a streaming transposed convolution's overlap-add, bias
subtraction and cut, without the copies), against eager and through the runtime."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import STATE_WRITES, assert_close, assert_one_partition_matching, export, run

aten = torch.ops.aten


class Pieces(nn.Module):
    def __init__(self, start, end):
        super().__init__()
        self.start, self.end = start, end

    def forward(self, a, b, c):
        return torch.cat([a * 2, b * 3, c * 4], dim=-1)[..., self.start : self.end] + 1


@pytest.mark.parametrize(
    "start, end",
    [(0, 3), (3, 8), (1, 2), (4, 7), (2, 12), (0, 12), (-4, None)],
    ids=["first", "second", "inside-first", "inside-second", "across", "all", "negative"],
)
def test_slice_of_cat_is_the_covered_pieces(start, end):
    inputs = torch.randn(1, 2, 3), torch.randn(1, 2, 5), torch.randn(1, 2, 4)
    ep = export(Pieces(start, end), *inputs)
    rewritten = phaseconv.rewrite(ep)
    if (start, end) == (0, 3):  # exactly the first piece: no copy left
        assert aten.slice.Tensor not in {n.target for n in rewritten.graph.nodes}
    assert_close(run(rewritten, *inputs), run(ep, *inputs))
    assert_one_partition_matching(rewritten, ep, *inputs)


class StreamingDeconv(nn.Module):
    """pocket-tts's StreamingConvTranspose1d: overlap-add, tail minus bias held back, cut."""

    def __init__(self):
        super().__init__()
        self.convtr = nn.ConvTranspose1d(4, 3, 8, 4)
        self.register_buffer("partial", torch.zeros(1, 3, 4))

    def forward(self, x):
        y = self.convtr(x)
        y[..., :4] += self.partial
        for_partial = y[..., -4:]
        for_partial -= self.convtr.bias[:, None]
        self.partial[:] = for_partial
        return y[..., :-4]


def test_streaming_deconvolution_over_several_calls():
    x = [torch.randn(1, 4, 3) for _ in range(3)]
    with torch.no_grad():  # state computed from parameters: exported under grad, ExecuTorch cannot lower it
        ep = export(StreamingDeconv(), x[0])
    initial = {name: value.clone() for name, value in ep.state_dict.items()}  # running a program writes its state
    rewritten = phaseconv.rewrite(ep)
    decisions = phaseconv.explain(ep)
    assert all(d.applied for d in decisions if d.rule in ("conv_transpose", "slice_scatter")), decisions
    assert not [n for n in rewritten.graph.nodes if n.target == aten.slice_scatter.default]
    assert_one_partition_matching(rewritten, ep, x[0], outside_allowed=STATE_WRITES)
    eager, program = StreamingDeconv().eval(), rewritten.module()
    eager.load_state_dict(initial, strict=False)
    with torch.no_grad():
        for chunk in x:  # the held-back tail of each call is added into the next one's output
            assert_close(program(chunk), eager(chunk))


def test_slice_on_another_dimension_is_left_alone():
    class Other(nn.Module):
        def forward(self, a, b):
            return torch.cat([a, b], dim=-1)[:, :1]

    ep = export(Other(), torch.randn(1, 2, 3), torch.randn(1, 2, 3))
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "slice_of_cat"]
    assert not decision.applied and "another dimension" in decision.reason
