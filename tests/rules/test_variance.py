"""var over the last dimension -> two fully connected averages, delegated, with its correction."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, decisions_of, export, run

aten = torch.ops.aten


class Normalize(nn.Module):
    """pocket-tts's flow-head norms: (x - mean) / sqrt(var + eps), and RMSNorm's unbiased var."""

    def __init__(self, unbiased: bool, keepdim: bool):
        super().__init__()
        self.unbiased, self.keepdim = unbiased, keepdim

    def forward(self, x):
        var = x.var(dim=-1, unbiased=self.unbiased, keepdim=self.keepdim)
        var = var if self.keepdim else var[..., None]
        return (x - x.mean(dim=-1, keepdim=True)) * torch.rsqrt(var + 1e-6)


@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("keepdim", [True, False])
@pytest.mark.parametrize("shape", [(2, 64), (1, 3, 192)])
def test_variance_is_delegated_and_exact(unbiased, keepdim, shape):
    x = torch.randn(*shape) * 3 + 1
    ep = export(Normalize(unbiased, keepdim), x)
    rewritten = phaseconv.rewrite(ep)
    assert not {aten.var.dim, aten.var.correction} & {n.target for n in rewritten.graph.nodes}
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_correction_from_var_correction():
    class Corrected(nn.Module):
        def forward(self, x):
            return torch.var(x, dim=-1, correction=2, keepdim=True)

    x = torch.randn(4, 10)
    ep = export(Corrected(), x)
    rewritten = phaseconv.rewrite(ep)
    assert_close(run(rewritten, x), torch.var(x, dim=-1, correction=2, keepdim=True))


@pytest.mark.parametrize(
    "module, inputs, reason",
    [
        (lambda x: x.var(dim=0), (torch.randn(4, 8),), "only a variance over the last dimension"),
        (lambda x: x.var(), (torch.randn(4, 8),), "only a variance over the last dimension"),
        (lambda x: x.var(dim=-1), (torch.randn(4, 1),), "no variance to compute"),
    ],
    ids=["first-dim", "all-dims", "one-value"],
)
def test_declines_with_a_reason(module, inputs, reason):
    class Wrapped(nn.Module):
        def forward(self, x):
            return module(x)

    (decision,) = decisions_of("variance", export(Wrapped(), *inputs))
    assert not decision.applied and reason in decision.reason
