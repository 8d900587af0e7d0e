"""The short-time Fourier transform as a strided convolution, its inverse as a transposed one
(plain tensor functions).

`torch.stft` of x with window w (centered in N = n_fft samples), hop h: frame t is the DFT of the
windowed samples x[t*h + n], n < N, so with bins k as output channels (real parts, then imaginary)

    Re X[k, t] = sum_n x[t*h + n] * w[n] * cos(2 pi k n / N),   Im X[k, t] = -sum_n ... * sin(2 pi k n / N)

is one convolution of stride h (times 1 / sqrt(N) when normalized).

`torch.istft` of a one-sided spectrum X [B, K, T] (K = N // 2 + 1 bins, N = n_fft), window w, hop h:
each frame is the inverse real DFT of its column,

    x_t[n] = (1/N) * sum_k c_k * (Re X[k, t] * cos(2 pi k n / N) - Im X[k, t] * sin(2 pi k n / N))

(c_k = 1 for the bins that have no mirror image, k = 0 and k = N / 2; 2 for the others), windowed and
overlap-added at steps of h, then divided by the overlap-added squared window (the envelope). With the
real and imaginary parts as 2K input channels that is one transposed convolution of stride h whose
weight is the windowed inverse DFT basis, then a division by a constant.
"""

from __future__ import annotations

import math

import torch


def padded_window(window: torch.Tensor | None, n_fft: int, win_length: int) -> torch.Tensor:
    """The window centered in n_fft samples, as torch.istft pads it (ones when there is none)."""
    window = torch.ones(win_length, dtype=torch.float64) if window is None else window.to(torch.float64)
    left = (n_fft - win_length) // 2
    return torch.nn.functional.pad(window, (left, n_fft - win_length - left))


def inverse_dft_weight(n_fft: int, window: torch.Tensor, normalized: bool = False) -> torch.Tensor:
    """W [2K, 1, N]: W[k, 0, n] = c_k / N * cos(2 pi k n / N) * w[n], W[K + k, 0, n] = -c_k / N * sin(...) * w[n];
    normalized (the spectrum was scaled by 1 / sqrt(N)): times sqrt(N). Computed in float64."""
    bins = n_fft // 2 + 1
    k = torch.arange(bins, dtype=torch.float64)[:, None]
    n = torch.arange(n_fft, dtype=torch.float64)[None, :]
    angle = 2 * math.pi * ((k * n) % n_fft) / n_fft  # the product reduced mod N: no precision lost to a large angle
    weight = torch.full((bins, 1), 2.0, dtype=torch.float64)
    weight[0] = 1.0
    if n_fft % 2 == 0:
        weight[-1] = 1.0
    scale = weight / n_fft * (math.sqrt(n_fft) if normalized else 1.0)
    basis = torch.cat([scale * torch.cos(angle), -scale * torch.sin(angle)]) * window
    return basis[:, None, :]


def window_envelope(window: torch.Tensor, hop: int, frames: int) -> torch.Tensor:
    """The squared window overlap-added over `frames` frames: [(frames - 1) * hop + N]."""
    n_fft = window.numel()
    envelope = torch.zeros((frames - 1) * hop + n_fft, dtype=torch.float64)
    for t in range(frames):
        envelope[t * hop : t * hop + n_fft] += window * window
    return envelope


def forward_dft_weight(n_fft: int, window: torch.Tensor, bins: int, normalized: bool = False) -> torch.Tensor:
    """W [2 * bins, 1, N]: W[k, 0, n] = w[n] * cos(2 pi k n / N), W[bins + k, 0, n] = -w[n] * sin(2 pi k n / N),
    times 1 / sqrt(N) when normalized; `bins` is N // 2 + 1 (one-sided) or N. Computed in float64."""
    k = torch.arange(bins, dtype=torch.float64)[:, None]
    n = torch.arange(n_fft, dtype=torch.float64)[None, :]
    angle = 2 * math.pi * ((k * n) % n_fft) / n_fft
    scale = 1 / math.sqrt(n_fft) if normalized else 1.0
    basis = torch.cat([torch.cos(angle), -torch.sin(angle)]) * window.to(torch.float64) * scale
    return basis[:, None, :]
