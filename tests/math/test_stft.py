"""The inverse STFT as a transposed convolution and an envelope division, against torch.istft."""

import pytest
import torch

from phaseconv.math.stft import forward_dft_weight, inverse_dft_weight, padded_window, window_envelope


def istft_as_convolution(spectrum, n_fft, hop, window, win_length, center, normalized):
    window = padded_window(window, n_fft, win_length)
    weight = inverse_dft_weight(n_fft, window, normalized)
    x = torch.cat([spectrum.real, spectrum.imag], dim=1).to(torch.float64)
    signal = torch.nn.functional.conv_transpose1d(x, weight, stride=hop)[:, 0]
    envelope = window_envelope(window, hop, spectrum.shape[-1])
    start = n_fft // 2 if center else 0
    end = envelope.numel() - (n_fft // 2 if center else 0)
    return signal[:, start:end] / envelope[start:end]


@pytest.mark.parametrize(
    "n_fft, hop, win_length, center, normalized",
    [(16, 4, 16, True, False), (16, 4, 12, True, False), (15, 5, 15, False, False), (32, 8, 32, True, True)],
    ids=["hann", "short-window", "odd-not-centered", "normalized"],
)
def test_matches_torch_istft(n_fft, hop, win_length, center, normalized):
    # not centered, the first and last samples have only the window's ends: none of them may be zero
    window = torch.hann_window(win_length, dtype=torch.float64) + (0 if center else 0.1)
    spectrum = torch.randn(2, n_fft // 2 + 1, 20, dtype=torch.complex128)
    expected = torch.istft(
        spectrum, n_fft, hop, win_length, window, center=center, normalized=normalized, onesided=True
    )
    actual = istft_as_convolution(spectrum, n_fft, hop, window, win_length, center, normalized)
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "n_fft, hop, win_length, onesided, normalized",
    [(16, 4, 16, True, False), (16, 4, 12, True, True), (15, 5, 15, False, False)],
    ids=["hann", "short-window-normalized", "odd-two-sided"],
)
def test_forward_dft_convolution_matches_torch_stft(n_fft, hop, win_length, onesided, normalized):
    window = torch.hann_window(win_length, dtype=torch.float64)
    x = torch.randn(2, 200, dtype=torch.float64)
    expected = torch.stft(
        x, n_fft, hop, win_length, window, center=False, normalized=normalized, onesided=onesided, return_complex=True
    )
    bins = expected.shape[1]
    weight = forward_dft_weight(n_fft, padded_window(window, n_fft, win_length), bins, normalized)
    spectrum = torch.nn.functional.conv1d(x[:, None], weight, stride=hop)
    torch.testing.assert_close(torch.complex(spectrum[:, :bins], spectrum[:, bins:]), expected)
