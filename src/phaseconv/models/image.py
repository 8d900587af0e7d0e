"""A MI-GAN-like inpainting generator: the upsampling patterns of StyleGAN-family generators.

Conv encoder-decoder with skip connections; each decoder level upsamples with a 4x4 stride-2
depthwise transposed convolution (the upfirdn x2 filter written as a module), refines with a conv,
adds a per-pixel noise map [H, W] scaled by a learned strength, and applies leaky ReLU with the
sqrt(2) gain; the RGB skip path upsamples with nearest x2.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

GAIN = 1.4142


class DecoderLevel(nn.Module):
    def __init__(self, c_in: int, c_out: int, size: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_in, 4, 2, 1, groups=c_in, bias=False)
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.register_buffer("noise", torch.randn(size, size))
        self.noise_strength = nn.Parameter(torch.tensor(0.1))
        self.to_rgb = nn.Conv2d(c_out, 3, 1)

    def forward(self, x: torch.Tensor, skip: torch.Tensor, rgb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(self.up(x)) + skip
        x = x + self.noise * self.noise_strength
        x = F.leaky_relu(x, 0.2) * GAIN
        rgb = F.interpolate(rgb, scale_factor=2, mode="nearest") + self.to_rgb(x)
        return x, rgb


class MiGanLike(nn.Module):
    """[N, 4, S, S] (RGB + mask) -> [N, 3, S, S], three levels down and up."""

    def __init__(self, size: int = 128, width: int = 32):
        super().__init__()
        channels = [width, 2 * width, 4 * width, 4 * width]
        self.stem = nn.Conv2d(4, channels[0], 3, padding=1)
        self.down = nn.ModuleList(nn.Conv2d(a, b, 3, 2, 1) for a, b in zip(channels, channels[1:]))
        sizes = [size // 2**i for i in range(len(channels))]
        self.bottom_rgb = nn.Conv2d(channels[-1], 3, 1)
        self.levels = nn.ModuleList(
            DecoderLevel(channels[i + 1], channels[i], sizes[i]) for i in reversed(range(len(channels) - 1))
        )

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = F.leaky_relu(self.stem(image), 0.2) * GAIN
        skips = []
        for down in self.down:
            skips.append(x)
            x = F.leaky_relu(down(x), 0.2) * GAIN
        rgb = self.bottom_rgb(x)
        for level, skip in zip(self.levels, reversed(skips)):
            x, rgb = level(x, skip, rgb)
        return rgb


def migan_generator(size: int = 128, width: int = 32, dtype: torch.dtype = torch.float32):
    """MI-GAN-like inpainting generator: image + mask [1, 4, 128, 128] -> image (4x4 stride-2 depthwise
    up-filters, nearest x2, noise, skips)."""
    torch.manual_seed(0)
    model = MiGanLike(size, width).eval().to(dtype)
    return model, (torch.randn(1, 4, size, size, dtype=dtype),)


def migan_generator_fp16():
    """The MI-GAN-like generator in float16."""
    return migan_generator(dtype=torch.float16)
