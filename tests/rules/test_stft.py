"""stft: a spectrogram front end as a strided convolution with the DFT basis, exact and delegated."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import assert_one_partition_matching, decisions_of, export, rewrite_applying

aten = torch.ops.aten


class Spectrogram(nn.Module):
    """torch.stft, then its magnitude (`abs`) or `view_as_real`."""

    def __init__(self, n_fft=64, hop=16, win_length=None, read="abs", **options):
        super().__init__()
        self.n_fft, self.hop, self.read, self.options = n_fft, hop, read, options  # center, normalized, onesided
        self.register_buffer("window", torch.hann_window(win_length or n_fft))

    def forward(self, x):
        window = self.window
        spectrum = torch.stft(x, self.n_fft, self.hop, window.numel(), window, return_complex=True, **self.options)
        return spectrum.abs() if self.read == "abs" else torch.view_as_real(spectrum)


class LogMel(nn.Module):
    """A log-mel front end: power spectrum, the mel filter bank [mels, K] as a linear layer, log."""

    def __init__(self, n_fft=128, hop=32, mels=20):
        super().__init__()
        self.spectrogram = Spectrogram(n_fft, hop)
        self.register_buffer("filters", torch.rand(mels, n_fft // 2 + 1))

    def forward(self, x):
        power = self.spectrogram(x) ** 2
        return torch.log(nn.functional.linear(power.transpose(1, 2), self.filters) + 1e-5)


CASES = {
    "magnitude-centered": ((2, 1000), {}),
    "real-imaginary": ((2, 1000), {"read": "real"}),
    "short-window-normalized": ((1, 800), {"win_length": 48, "normalized": True, "center": False}),
    "two-sided-signal": ((640,), {"onesided": False}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_stft_is_a_strided_convolution(name):
    shape, options = CASES[name]
    x = torch.randn(shape)
    rewritten = rewrite_applying("stft", export(Spectrogram(**options), x), x)
    targets = {n.target for n in rewritten.graph.nodes}
    assert aten.stft.default not in targets and aten.abs.default not in targets


@pytest.mark.parametrize("name", ["magnitude-centered", "real-imaginary"])
def test_through_the_runtime_in_one_partition(name):
    shape, options = CASES[name]
    x = torch.randn(shape)
    ep = export(Spectrogram(**options), x)
    assert_one_partition_matching(phaseconv.rewrite(ep), ep, x, scaled=True)


def test_a_log_mel_front_end_lowers_to_one_partition():
    x = torch.randn(1, 4000)
    ep = export(LogMel(), x)
    assert_one_partition_matching(phaseconv.rewrite(ep), ep, x, scaled=True)


class Phase(nn.Module):
    def forward(self, x):
        return torch.angle(torch.stft(x, 32, 8, window=torch.ones(32), return_complex=True))


class WindowGiven(nn.Module):
    def forward(self, x, window):
        return torch.stft(x, 32, 8, window=window, return_complex=True).abs()


@pytest.mark.parametrize(
    ("module", "inputs", "words"),
    [
        (Phase(), (torch.randn(1, 400),), "only its magnitude (abs) and view_as_real"),
        (WindowGiven(), (torch.randn(1, 400), torch.rand(32)), "window is not a constant"),
        (Spectrogram().double(), (torch.randn(1, 400, dtype=torch.float64),), "runs float32"),
        (Spectrogram(n_fft=512, hop=128), (torch.randn(1, 4000),), "lose to the portable FFT"),
    ],
    ids=["phase", "window-input", "float64", "long-window"],
)
def test_declines_with_the_reason(module, inputs, words):
    ep = export(module, *inputs)
    (decision,) = decisions_of("stft", ep)
    assert not decision.applied and words in decision.reason, decision
