"""squeeze / unsqueeze -> view, and last-dimension means -> fully connected: delegated, same values."""

import pytest
import torch
from torch import nn
from torch.export import Dim

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, export, lower_and_run, run


class Styles(nn.Module):
    """StyleGAN's pattern: 2-D styles broadcast as [N, C, 1, 1], pixel norm over the last dimension."""

    def __init__(self):
        super().__init__()
        self.affine = nn.Linear(8, 4)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x, z):
        z = z * (z.square().mean(dim=1, keepdim=True) + 1e-8).rsqrt()
        styles = self.affine(z)
        y = self.conv(x * styles[:, :, None, None])
        return y.unsqueeze(1).squeeze(1) + styles.mean(-1)[:, None, None, None]


def test_unsqueeze_squeeze_and_means_leave_nothing_outside():
    x, z = torch.randn(1, 4, 6, 6), torch.randn(1, 8)
    ep = export(Styles(), x, z)
    decisions = phaseconv.explain(ep)
    assert {d.rule for d in decisions if d.applied} >= {"views", "mean"}
    assert summarize_pte(to_xnnpack(ep).buffer).outside, "stock leaves unsqueeze and mean outside"
    rewritten = phaseconv.rewrite(ep)
    assert_close(run(rewritten, x, z), run(ep, x, z))
    assert_one_partition_matching(rewritten, ep, x, z)


@pytest.mark.parametrize("dims", [[0], [1, 2], None])
def test_means_over_other_dimensions_are_declined(dims):
    class Mean(nn.Module):
        def forward(self, x):
            return x.mean(dims) if dims is not None else x.mean()

    decisions = [d for d in phaseconv.explain(export(Mean(), torch.randn(2, 3, 4))) if d.rule == "mean"]
    assert all(not d.applied for d in decisions)


class Snake(nn.Module):
    """DAC's Snake activation: reshapes to sizes it read from its input, and back."""

    def __init__(self):
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(1, 8, 1) + 0.5)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(shape[0], shape[1], -1)
        x = x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)
        return x.reshape(shape)


def test_a_view_to_sizes_read_from_a_dynamic_input_infers_the_dynamic_one():
    module = Snake().eval()
    ep = torch.export.export(module, (torch.randn(1, 8, 20),), dynamic_shapes=({2: Dim("t", min=2, max=100)},))
    decisions = [d for d in phaseconv.explain(ep) if d.rule == "views"]
    assert decisions and all(d.applied and "-1" in d.detail for d in decisions), decisions
    rewritten = phaseconv.rewrite(ep)
    for length in (2, 33, 100):
        x = torch.randn(1, 8, length)
        summary, (out,) = lower_and_run(rewritten, x)
        assert summary.partitions == 1 and not summary.outside, summary
        torch.testing.assert_close(out, module(x), rtol=1e-5, atol=1e-5)
