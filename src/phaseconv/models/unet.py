"""A 2-D U-Net: conv blocks, max-pool down, ConvTranspose2d(k2, s2) up, skips concatenated."""

from __future__ import annotations

import torch
from torch import nn


def conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.Conv2d(c_out, c_out, 3, padding=1), nn.ReLU()
    )


class UNet(nn.Module):
    """[N, c_in, S, S] -> [N, c_out, S, S]; S divisible by 2**(len(widths) - 1)."""

    def __init__(self, c_in: int = 3, c_out: int = 3, widths=(32, 64, 128, 256)):
        super().__init__()
        self.down = nn.ModuleList(conv_block(a, b) for a, b in zip((c_in, *widths[:-1]), widths))
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ModuleList(nn.ConvTranspose2d(b, a, 2, 2) for a, b in zip(widths[:-1], widths[1:]))
        self.merge = nn.ModuleList(conv_block(2 * a, a) for a in widths[:-1])
        self.head = nn.Conv2d(widths[0], c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for index, block in enumerate(self.down):
            x = block(x if index == 0 else self.pool(x))
            skips.append(x)
        skips.pop()
        for up, merge in zip(reversed(self.up), reversed(self.merge)):
            x = merge(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet(size: int = 128, widths=(32, 64, 128, 256)):
    torch.manual_seed(0)
    return UNet(widths=widths).eval(), (torch.randn(1, 3, size, size),)
