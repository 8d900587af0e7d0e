"""Audio decoders as `transformers` builds them (real architectures, random weights).

Each factory returns (module, example_inputs) of the model *as built*: phaseconv.prepare is the
user's step, so benchmarks and tests can show the model with and without it.
"""

from __future__ import annotations

import torch
from torch import nn

from phaseconv.errors import PhaseconvError


def _transformers():
    try:
        import transformers
    except ImportError:
        raise PhaseconvError("the transformers models need `pip install 'transformers>=5,<6'`") from None
    transformers.logging.set_verbosity_error()
    return transformers


class AudioValues(nn.Module):
    """decoder(x).audio_values as a plain tensor-in, tensor-out module."""

    def __init__(self, decoder: nn.Module):
        super().__init__()
        self.decoder = decoder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(x).audio_values


class MimiCodesToAudio(nn.Module):
    """MimiModel.decode(codes).audio_values: codebook lookups, then the latents decoder."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.quantizer, self.decoder = model.quantizer, model.decoder

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.quantizer.decode(codes)).audio_values


def _mimi(config: dict):
    transformers = _transformers()
    torch.manual_seed(0)
    model = transformers.MimiModel(transformers.MimiConfig(**config))
    model.encoder = None
    return model.eval()


def mimi_latents_decoder(frames: int = 1, **config):
    """MimiModel's decoder (default config): latents [1, 512, frames] -> 80 ms of audio per frame."""
    model = _mimi(config)
    return AudioValues(model.decoder), (torch.randn(1, model.config.hidden_size, frames),)


def mimi_codes_decoder(frames: int = 25, **config):
    """MimiModel.decode: codes [1, 32, frames] -> audio.

    A new model's codebooks are all zeros (they are learned running sums), which would decode every
    code to silence; they get random entries here, as trained ones have.
    """
    model = _mimi(config)
    for module in model.quantizer.modules():
        if hasattr(module, "embed_sum"):
            module.embed_sum.normal_()
            module.cluster_usage.fill_(1.0)
            module._embed = None
    codes = torch.randint(0, model.config.codebook_size, (1, model.config.num_quantizers, frames))
    return MimiCodesToAudio(model), (codes,)


def encodec_decoder(seconds: float = 1.0, **config):
    """EncodecModel's 24 kHz decoder (default config): latents [1, 128, 75 per second] -> audio."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.EncodecConfig(**config)
    model = transformers.EncodecModel(config).eval()
    frames = max(1, round(seconds * config.frame_rate))
    return model.decoder, (torch.randn(1, config.hidden_size, frames),)


def dac_decoder(seconds: float = 1.0, **config):
    """DacModel's decoder (default config, 16 kHz): latents [1, 1024, 31 per second] -> audio."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.DacConfig(**config)
    model = transformers.DacModel(config).eval()
    frames = max(1, round(seconds * config.sampling_rate / config.hop_length))
    return model.decoder, (torch.randn(1, config.hidden_size, frames),)


HIFIGAN_V1 = dict(upsample_rates=[8, 8, 2, 2], upsample_kernel_sizes=[16, 16, 4, 4], upsample_initial_channel=512)


def hifigan(frames: int = 100, version: str = "speecht5", **config):
    """SpeechT5HifiGan: mel [1, frames, 80] -> audio; version "v1" is HiFi-GAN V1 (rates 8,8,2,2)."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.SpeechT5HifiGanConfig(**(HIFIGAN_V1 if version == "v1" else {}), **config)
    model = transformers.SpeechT5HifiGan(config).eval()
    return model, (torch.randn(1, frames, config.model_in_dim),)
