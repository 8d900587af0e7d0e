"""Factories the CLI tests name as module.path:factory."""

import torch

from phaseconv.models.audio import seanet_decoder


def small_decoder():
    return seanet_decoder(frames=2, latent=16, channels=32)


def broken():
    raise RuntimeError("the checkpoint is missing")


def not_a_model():
    return 42


def unexportable():
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    return DataDependent(), (torch.randn(2),)


def tiny_mimi():
    """transformers' Mimi decoder as built (tiny config): conv settings in 0-d tensors, so it lowers
    only after phaseconv.prepare."""
    from phaseconv.models import transformers_audio
    from tests.helpers import TINY_MIMI

    return transformers_audio.mimi_latents_decoder(2, **TINY_MIMI)


def dynamic_decoder():
    """small_decoder with a dynamic number of latent frames, 1 to 12."""
    from torch.export import Dim

    module, inputs = seanet_decoder(frames=6, latent=16, channels=32)
    return module, inputs, ({2: Dim("frames", min=1, max=12)},)


def small_lstm():
    """A 2-layer LSTM over 8 steps, its output sequence, as in EnCodec: its unrolled steps read each
    recurrent weight."""

    class OutputSequence(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(32, 128, 2)

        def forward(self, x):
            return self.lstm(x)[0]

    return OutputSequence(), (torch.randn(8, 1, 32),)


def causal_step():
    from tests.helpers import CausalStep

    torch.manual_seed(0)
    return CausalStep().eval(), (torch.randn(1, 4, 5),)
