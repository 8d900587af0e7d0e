"""Image decoders as `diffusers` builds them (real architectures, random weights): the VAE decoder
of latent diffusion, `AutoencoderKL.decode`, latents [1, 4, h, w] -> an image [1, 3, 8h, 8w].

Its upsampling is nearest x2 then a 3x3 convolution, its norms group norms (32 groups) and its
middle block one self-attention over every latent position.
"""

from __future__ import annotations

import torch
from torch import nn

from phaseconv.errors import PhaseconvError

# Stable Diffusion 1.x's VAE (the config of runwayml/stable-diffusion-v1-5's vae/config.json).
SD1 = {
    "block_out_channels": (128, 256, 512, 512),
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "layers_per_block": 2,
    "latent_channels": 4,
    "norm_num_groups": 32,
    "sample_size": 512,
}
# The same architecture, narrow and shallow: seconds to export and lower, for tests.
SMALL = SD1 | {
    "block_out_channels": (32, 64),
    "down_block_types": ("DownEncoderBlock2D",) * 2,
    "up_block_types": ("UpDecoderBlock2D",) * 2,
    "layers_per_block": 1,
    "sample_size": 64,
}


class DecodedSample(nn.Module):
    """vae.decode(latents).sample as a plain tensor-in, tensor-out module."""

    def __init__(self, vae: nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(latents).sample


def vae_decoder(latents: int = 32, config: dict = SD1):
    """AutoencoderKL's decoder: latents [1, 4, n, n] -> image [1, 3, 2^(blocks - 1) n, ...] (8n for SD 1.x)."""
    try:
        from diffusers import AutoencoderKL
    except ImportError:
        raise PhaseconvError("the diffusers models need `pip install diffusers`") from None
    torch.manual_seed(0)
    vae = AutoencoderKL(**config).eval()
    vae.encoder = vae.quant_conv = None
    return DecodedSample(vae), (torch.randn(1, config["latent_channels"], latents, latents),)
