"""istft: an iSTFT head (Vocos) as a transposed convolution and an envelope division, delegated and exact."""

import pytest
import torch
from torch import nn

from phaseconv.rules.istft import IstftRule  # noqa: F401  (the rule under test, in the default set)
from tests.helpers import assert_one_partition_matching, decisions_of, export, rewrite_applying

aten = torch.ops.aten


class IstftHead(nn.Module):
    """Vocos's head: a linear layer to magnitude and phase, exp and cos / sin, then torch.istft."""

    def __init__(self, dim=32, n_fft=64, hop=16, center=True, win_length=None, length=None, vocos_form=False):
        super().__init__()
        self.n_fft, self.hop, self.center, self.length = n_fft, hop, center, length
        self.vocos_form = vocos_form
        self.out = nn.Linear(dim, n_fft + 2)
        window = torch.hann_window(win_length or n_fft)
        self.register_buffer("window", window if center else window + 0.1)  # not centered: no zero at the ends

    def forward(self, x):
        magnitude, phase = self.out(x.transpose(1, 2)).transpose(1, 2).chunk(2, dim=1)
        magnitude = torch.exp(magnitude).clip(max=1e2)
        if self.vocos_form:  # as vocos.heads.ISTFTHead writes it
            spectrum = magnitude * (torch.cos(phase) + 1j * torch.sin(phase))
        else:
            spectrum = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        return torch.istft(
            spectrum, self.n_fft, self.hop, self.window.numel(), self.window, center=self.center, length=self.length
        )


@pytest.mark.parametrize(
    "options",
    [{}, {"center": False}, {"win_length": 48}, {"length": 300}, {"vocos_form": True}],
    ids=["centered", "not-centered", "short-window", "length", "mag-times-cos-plus-1j-sin"],
)
def test_istft_is_a_polyphase_convolution_in_one_partition(options):
    x = torch.randn(1, 32, 24)
    ep = export(IstftHead(**options), x)
    rewritten = rewrite_applying("istft", ep, x)
    targets = {n.target for n in rewritten.graph.nodes}
    assert aten.istft.default not in targets and aten.conv_transpose1d.default not in targets
    assert_one_partition_matching(rewritten, ep, x, scaled=True)


def test_declines_a_spectrum_from_elsewhere():
    class Given(nn.Module):
        def forward(self, spectrum):
            return torch.istft(spectrum, 16, 4, window=torch.ones(16))

    ep = export(Given(), torch.randn(1, 9, 10, dtype=torch.complex64))
    (decision,) = decisions_of("istft", ep)
    assert not decision.applied and "not built from real parts in the program" in decision.reason


def test_vocos_form_emits_the_two_products_and_no_product_by_one():
    x = torch.randn(1, 32, 24)
    rewritten = rewrite_applying("istft", export(IstftHead(vocos_form=True), x), x)
    products = [n for n in rewritten.graph.nodes if n.target == aten.mul.Tensor]
    assert len(products) == 2 and all(isinstance(n.args[1], torch.fx.Node) for n in products), products


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda re, im: torch.complex(re, im) * torch.complex(im, re), "multiplies two complex tensors"),
        (lambda re, im: torch.complex(re, im) * (1 + 2j), "multiplies a complex tensor by a complex scalar"),
        (lambda re, im: re * 1j, "a part that is zero everywhere"),
    ],
    ids=["complex-product", "complex-scalar", "no-real-part"],
)
def test_declines_complex_arithmetic_it_cannot_split(build, reason):
    class Given(nn.Module):
        def forward(self, re, im):
            return torch.istft(build(re, im), 16, 4, window=torch.hann_window(16))

    ep = export(Given(), torch.randn(1, 9, 10), torch.randn(1, 9, 10))
    (decision,) = decisions_of("istft", ep)
    assert not decision.applied and reason in decision.reason, decision.reason
