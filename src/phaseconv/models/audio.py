"""A SEANet audio decoder as in Mimi and EnCodec: latents -> waveform through causal upsamplers."""

from __future__ import annotations

import torch
from torch import nn


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d(k = 2s) whose last k - s outputs are trimmed, as in Mimi's streaming decoder."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, 2 * stride, stride)
        self.trim = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)[..., : -self.trim]


class ResidualUnit(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.block = nn.Sequential(
            nn.ELU(), nn.Conv1d(channels, channels // 2, 3, padding=1), nn.ELU(), nn.Conv1d(channels // 2, channels, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class FrameUpsampler(nn.Module):
    """Mimi's frame-rate upsampler: depthwise ConvTranspose1d(k4, s2, no bias), causal trim of k - s."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(channels, channels, 4, 2, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)[..., :-2]


class SeanetDecoder(nn.Module):
    """[frame upsampler] -> conv k7 -> [ELU, ConvTranspose1d(k = 2s, s), residual unit] per stride
    -> ELU, conv k7 -> audio."""

    def __init__(
        self,
        latent: int = 512,
        channels: int = 512,
        strides: tuple[int, ...] = (8, 6, 5, 4),
        frame_upsampler: bool = False,
    ):
        super().__init__()
        layers: list[nn.Module] = [FrameUpsampler(latent)] if frame_upsampler else []
        layers.append(nn.Conv1d(latent, channels, 7, padding=3))
        for stride in strides:
            layers += [nn.ELU(), CausalConvTranspose1d(channels, channels // 2, stride), ResidualUnit(channels // 2)]
            channels //= 2
        layers += [nn.ELU(), nn.Conv1d(channels, 1, 7, padding=3)]
        self.layers = nn.Sequential(*layers)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        return self.layers(latents)


def seanet_decoder(frames: int = 25, latent: int = 512, channels: int = 512) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """SEANet decoder as in EnCodec (strides 8, 6, 5, 4: 960 samples per latent step) and example latents."""
    torch.manual_seed(0)
    model = SeanetDecoder(latent, channels).eval()
    return model, (torch.randn(1, latent, frames),)


def mimi_decoder(frames: int = 12, latent: int = 512, channels: int = 512) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """Mimi-like decoder: depthwise k4 s2 frame upsampler, then the SEANet decoder: 1920 samples per
    12.5 Hz frame (12 frames: about 1 s at 24 kHz)."""
    torch.manual_seed(0)
    model = SeanetDecoder(latent, channels, frame_upsampler=True).eval()
    return model, (torch.randn(1, latent, frames),)
