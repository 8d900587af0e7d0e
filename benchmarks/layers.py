"""Single-layer cases: stock XNNPACK deconvolution vs phaseconv vs the convolution alone (the limit)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class LayerCase:
    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    limit: nn.Module | None  # the stride-1 convolution with the rewrite's multiply-adds


def deconv_case(
    name: str, spatial: int, c_in: int, c_out: int, kernel: int, stride: int, padding: int, size
) -> LayerCase:
    """ConvTranspose{1,2}d and, as its limit, Conv{1,2}d(c_in, s^D * c_out, m = ceil(k/s), padding m - 1)."""
    torch.manual_seed(0)
    deconv = (nn.ConvTranspose1d, nn.ConvTranspose2d)[spatial - 1](c_in, c_out, kernel, stride, padding)
    taps = math.ceil(kernel / stride)
    limit = (nn.Conv1d, nn.Conv2d)[spatial - 1](c_in, stride**spatial * c_out, taps, padding=taps - 1)
    return LayerCase(name, deconv.eval(), (torch.randn(1, c_in, *size),), limit.eval())


def layer_cases() -> list[LayerCase]:
    cases = []
    for c_in, kernel, stride in ((512, 16, 8), (256, 12, 6), (128, 10, 5), (64, 8, 4)):
        for steps in (1, 25):
            name = f"1d {c_in}->{c_in // 2} k{kernel} s{stride} T={steps}"
            cases.append(deconv_case(name, 1, c_in, c_in // 2, kernel, stride, 0, (steps,)))
    cases.append(deconv_case("2d 128->64 k4 s2 p1 64x64", 2, 128, 64, 4, 2, 1, (64, 64)))
    return cases


def depthwise_case(name: str, spatial: int, channels: int, kernel: int, stride: int, padding: int, size) -> LayerCase:
    torch.manual_seed(0)
    deconv = (nn.ConvTranspose1d, nn.ConvTranspose2d)[spatial - 1]
    module = deconv(channels, channels, kernel, stride, padding, groups=channels, bias=False)
    return LayerCase(name, module.eval(), (torch.randn(1, channels, *size),), None)


def depthwise_cases() -> list[LayerCase]:
    """Mimi's frame upsampler and MI-GAN's 4x4 stride-2 upsampling filters."""
    return [
        depthwise_case("1d depthwise 512 k4 s2 T=25 (Mimi)", 1, 512, 4, 2, 1, (25,)),
        depthwise_case("2d depthwise 128 k4 s2 p1 64x64 (MI-GAN)", 2, 128, 4, 2, 1, (64, 64)),
        depthwise_case("2d depthwise 32 k4 s2 p1 128x128 (MI-GAN)", 2, 32, 4, 2, 1, (128, 128)),
    ]


class Nearest(nn.Module):
    def __init__(self, scale: int):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.interpolate(x, scale_factor=self.scale, mode="nearest")


class GainAndNoise(nn.Module):
    """StyleGAN's conv -> + noise[H, W] * strength -> leaky ReLU * sqrt(2) (the constant_operands rule)."""

    def __init__(self, channels: int, size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.register_buffer("noise", torch.randn(size, size))
        self.strength = nn.Parameter(torch.tensor(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x) + self.noise * self.strength
        return nn.functional.leaky_relu(y, 0.2) * 1.4142


def operator_cases() -> list[LayerCase]:
    """Operators XNNPACK leaves to portable kernels (ELU, nearest upsampling) and scalar/low-rank operands."""
    torch.manual_seed(0)
    return [
        LayerCase(
            "conv + noise[H,W] + gain fp32 [1,32,128,128]",
            GainAndNoise(32, 128).eval(),
            (torch.randn(1, 32, 128, 128),),
            None,
        ),
        LayerCase(
            "conv + noise[H,W] + gain fp16 [1,32,128,128]",
            GainAndNoise(32, 128).eval().half(),
            (torch.randn(1, 32, 128, 128, dtype=torch.float16),),
            None,
        ),
        LayerCase("elu [1,64,6000]", nn.ELU().eval(), (torch.randn(1, 64, 6000),), None),
        LayerCase("nearest x2 [1,64,64,64]", Nearest(2).eval(), (torch.randn(1, 64, 64, 64),), None),
        LayerCase("nearest x2 1d [1,128,2000]", Nearest(2).eval(), (torch.randn(1, 128, 2000),), None),
    ]


class UpsampleConv(nn.Module):
    """Stable Diffusion's Upsample2D: nearest x2 then a 3x3 convolution (the nearest_conv rule)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(nn.functional.interpolate(x, scale_factor=2, mode="nearest"))


def upsample_conv_cases() -> list[LayerCase]:
    """The SD 1.x VAE decoder's three upsamplers at 32x32 latents (the last at a quarter of its area),
    with, as the limit, the 2x2 convolution of 4 * C outputs the rewrite computes."""
    torch.manual_seed(0)
    cases = []
    for channels, size in ((512, 32), (512, 64), (256, 64)):
        limit = nn.Conv2d(channels, 4 * channels, 2, padding=1)
        module = UpsampleConv(channels).eval()
        name = f"Upsample2D {channels} ch {size}x{size} -> {2 * size}x{2 * size}"
        cases.append(LayerCase(name, module, (torch.randn(1, channels, size, size),), limit.eval()))
    return cases


class Magnitude(nn.Module):
    """A magnitude spectrogram, centered, Hann window: |torch.stft(x)| (the stft rule)."""

    def __init__(self, n_fft: int, hop: int):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stft(x, self.n_fft, self.hop, window=self.window, return_complex=True).abs()


def stft_cases() -> list[LayerCase]:
    """Spectrogram front ends on 1 s at 24 kHz: stock runs a portable FFT, phaseconv a DFT convolution."""
    torch.manual_seed(0)
    return [
        LayerCase(f"stft n_fft {n} hop {hop} |X| [1,24000]", Magnitude(n, hop).eval(), (torch.randn(1, 24000),), None)
        for n, hop in ((1024, 256), (512, 128), (256, 64), (128, 32), (64, 16))
    ]
