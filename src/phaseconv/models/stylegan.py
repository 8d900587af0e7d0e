"""A StyleGAN2-like synthesis network: the upsampling pattern of StyleGAN2's "skip" generator.

Mapping MLP z -> w; a learned 4x4 constant; per resolution two modulated 3x3 convs (styles scale
the input channels, demodulation rescales the output, as StyleGAN2 does without fused modconv so
the weights stay constants), noise maps and leaky ReLU with the sqrt(2) gain; upsampling by
upfirdn2d x2 with the [1, 3, 3, 1] filter, written as a depthwise 4x4 stride-2 transposed
convolution, on the features and on the RGB skip image.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

GAIN = 2**0.5


def upfir_x2(channels: int) -> nn.ConvTranspose2d:
    """upfirdn2d(x, f=[1, 3, 3, 1], up=2): a depthwise 4x4 stride-2 deconvolution, gain 4."""
    taps = torch.tensor([1.0, 3.0, 3.0, 1.0])
    kernel = torch.outer(taps, taps) / taps.sum() ** 2 * 4
    up = nn.ConvTranspose2d(channels, channels, 4, 2, 1, groups=channels, bias=False)
    up.weight.data.copy_(kernel.expand(channels, 1, 4, 4))
    up.weight.requires_grad_(False)
    return up


class ModulatedConv(nn.Module):
    """conv(x * s, W) * d with s = affine(w), d = rsqrt(s^2 @ sum_k W^2 + 1e-8), then noise, bias, lrelu."""

    def __init__(self, c_in: int, c_out: int, w_dim: int, size: int, kernel: int = 3, demodulate: bool = True):
        super().__init__()
        self.affine = nn.Linear(w_dim, c_in)
        self.affine.bias.data.fill_(1.0)
        self.weight = nn.Parameter(torch.randn(c_out, c_in, kernel, kernel) / (c_in * kernel * kernel) ** 0.5)
        self.bias = nn.Parameter(torch.zeros(c_out))
        self.demodulate = demodulate
        self.register_buffer("noise", torch.randn(size, size))
        self.noise_strength = nn.Parameter(torch.tensor(0.05))

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        styles = self.affine(w)
        x = F.conv2d(x * styles.reshape(x.shape[0], -1, 1, 1), self.weight, padding=self.weight.shape[-1] // 2)
        if not self.demodulate:  # ToRGB
            return x + self.bias.reshape(1, -1, 1, 1)
        energy = self.weight.square().sum(dim=[2, 3])  # [O, I], depends on parameters only
        x = x * (styles.square() @ energy.t() + 1e-8).rsqrt().reshape(x.shape[0], -1, 1, 1)
        x = x + self.noise * self.noise_strength + self.bias.reshape(1, -1, 1, 1)
        return F.leaky_relu(x, 0.2) * GAIN


class SynthesisBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, w_dim: int, size: int):
        super().__init__()
        self.up = upfir_x2(c_in)
        self.conv0 = ModulatedConv(c_in, c_out, w_dim, size)
        self.conv1 = ModulatedConv(c_out, c_out, w_dim, size)
        self.to_rgb = ModulatedConv(c_out, 3, w_dim, size, kernel=1, demodulate=False)
        self.up_rgb = upfir_x2(3)

    def forward(self, x: torch.Tensor, rgb: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv1(self.conv0(self.up(x), w), w)
        return x, self.up_rgb(rgb) + self.to_rgb(x, w)


class StyleGan2Like(nn.Module):
    """z [N, w_dim] -> image [N, 3, S, S]; S = 4 * 2**len(channels[1:])."""

    def __init__(self, w_dim: int = 256, channels=(256, 256, 256, 128, 64, 32)):
        super().__init__()
        layers = []
        for _ in range(4):
            layers += [nn.Linear(w_dim, w_dim), nn.LeakyReLU(0.2)]
        self.mapping = nn.Sequential(*layers)
        self.const = nn.Parameter(torch.randn(1, channels[0], 4, 4))
        self.conv = ModulatedConv(channels[0], channels[0], w_dim, 4)
        self.to_rgb = ModulatedConv(channels[0], 3, w_dim, 4, kernel=1, demodulate=False)
        sizes = [8 * 2**i for i in range(len(channels) - 1)]
        self.blocks = nn.ModuleList(SynthesisBlock(a, b, w_dim, s) for a, b, s in zip(channels, channels[1:], sizes))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        w = self.mapping(z * (z.square().mean(dim=1, keepdim=True) + 1e-8).rsqrt())
        x = self.conv(self.const, w)
        rgb = self.to_rgb(x, w)
        for block in self.blocks:
            x, rgb = block(x, rgb, w)
        return rgb


def stylegan2_generator(w_dim: int = 256, channels=(256, 256, 256, 128, 64, 32)):
    """128x128 with the default channels."""
    torch.manual_seed(0)
    return StyleGan2Like(w_dim, channels).eval(), (torch.randn(1, w_dim),)
