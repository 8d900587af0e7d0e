"""Built-in example models (random weights, real architectures), reachable as `demo:NAME`."""

from collections.abc import Callable

import torch

from phaseconv.models.audio import mimi_decoder, seanet_decoder
from phaseconv.models.image import migan_generator, migan_generator_fp16

Factory = Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]

DEMO_MODELS: dict[str, Factory] = {
    "mimi-decoder": mimi_decoder,
    "seanet-decoder": seanet_decoder,
    "migan": migan_generator,
    "migan-fp16": migan_generator_fp16,
}
