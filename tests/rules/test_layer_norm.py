"""LayerNorm over the last dimension -> fully connected averages + elementwise ops, all delegated."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, export, lower_and_run, run


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("shape", [(2, 7, 24), (1, 3, 5, 16)], ids=["3d", "4d"])
def test_layer_norm_matches_eager_in_one_partition(shape, decompose, affine):
    torch.manual_seed(0)
    norm = nn.LayerNorm(shape[-1], elementwise_affine=affine)
    if affine:
        nn.init.normal_(norm.weight)
        nn.init.normal_(norm.bias)
    x = torch.randn(shape) * 3 + 1
    ep = export(norm, x, decompose=decompose)
    rewritten = phaseconv.rewrite(ep)
    assert not any(n.op == "call_function" and "layer_norm" in str(n.target) for n in rewritten.graph.nodes)
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_stock_runs_layer_norm_portable():
    x = torch.randn(1, 4, 8)
    assert summarize_pte(to_xnnpack(export(nn.LayerNorm(8), x)).buffer).outside


def test_layer_norm_over_two_dimensions_is_declined():
    x = torch.randn(1, 4, 6, 8)
    (decision,) = phaseconv.explain(export(nn.LayerNorm([6, 8]), x))
    assert not decision.applied and "2 dimensions" in decision.reason


class SplitByPortableOp(nn.Module):
    """Two layer norms and two ELUs in different partitions: cumsum is not delegated."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.LayerNorm(8), nn.LayerNorm(8)

    def forward(self, x):
        y = torch.cumsum(nn.functional.elu(self.a(x)), dim=-1)
        return nn.functional.elu(self.b(y))


def test_constants_are_not_shared_across_partitions():
    """ExecuTorch fails to lower a lifted constant that two partitions read: each rewrite has its own."""
    x = torch.randn(1, 4, 8)
    ep = export(SplitByPortableOp(), x)
    summary, (out,) = lower_and_run(phaseconv.rewrite(ep), x)
    assert summary.partitions == 2 and list(summary.outside) == ["aten::cumsum.out"], summary
    assert_close(out, run(ep, x))
