"""ELU -> operators XNNPACK runs, against eager and through the runtime."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, export, run


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.0])
@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core-aten"])
def test_elu_matches_eager_and_runs_in_one_partition(alpha, decompose):
    x = torch.linspace(-20, 20, 4001).reshape(1, 1, -1)  # both branches, tiny and large magnitudes
    ep = export(nn.ELU(alpha), x, decompose=decompose)
    rewritten = phaseconv.rewrite(ep)
    assert not any(n.target == torch.ops.aten.elu.default for n in rewritten.graph.nodes)
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


def test_elu_positive_branch_is_exactly_the_input():
    x = torch.rand(1, 8, 100) * 10 + 1e-3
    rewritten = phaseconv.rewrite(export(nn.ELU(), x))
    assert torch.equal(run(rewritten, x), x)


def test_elu_fp16_through_the_runtime_in_one_partition():
    x = torch.linspace(-8, 8, 1001, dtype=torch.float16).reshape(1, 1, -1)
    ep = export(nn.ELU(0.5), x)
    assert_one_partition_matching(phaseconv.rewrite(ep), ep, x)


def test_elu_declines_other_dtypes_with_a_reason():
    x = torch.randn(1, 4, 10, dtype=torch.bfloat16)
    (decision,) = phaseconv.explain(export(nn.ELU(), x))
    assert not decision.applied and "bfloat16" in decision.reason


def test_selu_like_scales_are_declined():
    class ScaledElu(nn.Module):
        def forward(self, x):
            return torch.ops.aten.elu.default(x, 1.0, 2.0, 1.0)

    x = torch.randn(1, 4, 10)
    (decision,) = phaseconv.explain(export(ScaledElu(), x))
    assert not decision.applied and "scale" in decision.reason


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_lower_gives_fp32_elu_to_xnnpack_itself_and_rewrites_fp16(dtype):
    from phaseconv.runtimes.executorch import LoadedProgram

    x = torch.linspace(-20, 20, 4001, dtype=dtype).reshape(1, 1, -1)
    ep = export(nn.ELU(0.5), x)
    lowered = phaseconv.lower(ep)
    (decision,) = lowered.decisions
    assert decision.applied == (dtype == torch.float16)
    assert lowered.summary.partitions == 1 and not lowered.summary.outside, lowered.summary
    assert (lowered.summary.inside["XNNELU"] == 1) == (dtype == torch.float32)
    (out,) = LoadedProgram(lowered.buffer).run((x,))
    assert_close(out, run(ep, x))
