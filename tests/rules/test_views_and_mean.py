"""squeeze / unsqueeze -> view, and last-dimension means -> fully connected: delegated, same values."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.runtimes.executorch import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, export, run


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
