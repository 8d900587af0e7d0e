"""slice_scatter (a streaming overlap-add, `y[..., :n] += partial`) -> cat of slices, delegated."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, export, run


class OverlapAdd(nn.Module):
    """A transposed convolution's held-back tail added into the first outputs, as streaming decoders do."""

    def __init__(self, start, end, dim=-1):
        super().__init__()
        self.start, self.end, self.dim = start, end, dim

    def forward(self, y, partial):
        y = y * 2  # an activation, not the input itself
        index = [slice(None)] * y.dim()
        index[self.dim] = slice(self.start, self.end)
        y[tuple(index)] += partial
        return y


@pytest.mark.parametrize(
    "start, end, dim",
    [(0, 4, -1), (3, 7, -1), (6, 10, -1), (0, 10, -1), (1, 3, 1)],
    ids=["head", "middle", "tail", "all", "channels"],
)
def test_overlap_add_is_a_cat_in_one_partition(start, end, dim):
    y = torch.randn(1, 6, 10)
    shape = list(y.shape)
    shape[dim] = end - start
    partial = torch.randn(shape)
    ep = export(OverlapAdd(start, end, dim), y, partial)
    rewritten = phaseconv.rewrite(ep)
    targets = {n.target for n in rewritten.graph.nodes}
    assert torch.ops.aten.slice_scatter.default not in targets
    assert_close(run(rewritten, y, partial), run(ep, y, partial))
    assert_one_partition_matching(rewritten, ep, y, partial)


def test_strided_scatter_is_declined_with_a_reason():
    class Strided(nn.Module):
        def forward(self, y, partial):
            return torch.slice_scatter(y, partial, dim=2, start=0, end=10, step=2)

    ep = export(Strided(), torch.randn(1, 2, 10), torch.randn(1, 2, 5))
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "slice_scatter"]
    assert not decision.applied and "step 2" in decision.reason
