"""Vocos as the `vocos` package builds it (real architecture, random weights): a mel spectrogram
[1, 100, frames] -> 24 kHz audio [1, 256 * (frames - 1)], a ConvNeXt backbone and an iSTFT head
(`mag * (cos(p) + 1j * sin(p))`, then torch.istft), which the istft rule makes a transposed convolution.

The `vocos` package imports torchaudio, whose PyPI wheel is a CUDA build: beside a CPU-only torch its
compiled extension fails to load (libc10_cuda.so). Vocos's backbone and head use none of it (only the
mel feature extractor, outside the decoder, reads torchaudio, in Python), so when that load fails,
torchaudio is imported without its extension.
"""

from __future__ import annotations

import sys
import types

import torch
from torch import nn

from phaseconv.errors import PhaseconvError

# charactr/vocos-mel-24khz's config.yaml: the backbone and head of the mel vocoder.
MEL_24KHZ = {
    "backbone": {"input_channels": 100, "dim": 512, "intermediate_dim": 1536, "num_layers": 8},
    "head": {"dim": 512, "n_fft": 1024, "hop_length": 256, "padding": "center"},
}


def _torchaudio_without_extension() -> None:
    """Import torchaudio with its compiled extension marked absent (torchaudio's own flag for a build
    without it), after the real load failed."""
    for name in [m for m in sys.modules if m == "torchaudio" or m.startswith("torchaudio.")]:
        del sys.modules[name]
    extension = types.ModuleType("torchaudio._extension")
    extension._IS_TORCHAUDIO_EXT_AVAILABLE = extension._IS_ALIGN_AVAILABLE = False
    extension.fail_if_no_align = lambda function: function
    sys.modules["torchaudio._extension"] = extension
    import torchaudio  # noqa: F401


def vocos_modules():
    """vocos's VocosBackbone and ISTFTHead classes; PhaseconvError when the package is missing."""
    try:
        try:
            import torchaudio  # noqa: F401
        except OSError:  # a CUDA build of torchaudio beside a CPU torch
            _torchaudio_without_extension()
        from vocos.heads import ISTFTHead
        from vocos.models import VocosBackbone
    except ImportError:
        raise PhaseconvError("the vocos models need `pip install vocos torchaudio`") from None
    return VocosBackbone, ISTFTHead


class MelVocoder(nn.Module):
    """Vocos.decode: backbone, then head, mel [1, n_mels, frames] -> audio [1, samples]."""

    def __init__(self, config: dict):
        super().__init__()
        backbone, head = vocos_modules()
        self.backbone = backbone(**config["backbone"])
        self.head = head(**config["head"])

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(mel))


def mel_vocoder(frames: int = 94, config: dict = MEL_24KHZ):
    """Vocos's mel vocoder at `frames` mel frames (94: about 1 s at 24 kHz)."""
    torch.manual_seed(0)
    model = MelVocoder(config).eval()
    return model, (torch.randn(1, config["backbone"]["input_channels"], frames),)
