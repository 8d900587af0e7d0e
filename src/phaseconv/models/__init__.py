"""Built-in example models (random weights, real architectures), reachable as `demo:NAME`."""

from collections.abc import Callable

import torch

from phaseconv.models.audio import seanet_decoder

Factory = Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]

DEMO_MODELS: dict[str, Factory] = {
    "mimi-decoder": seanet_decoder,
}
