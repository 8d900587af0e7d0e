"""pocket-tts (Kyutai's CPU text-to-speech) on ExecuTorch: the Mimi decoder as a streaming step
(decoder.py), the flow language model's steps with its KV cache as state (language_model.py), and
the config's files as pocket-tts gets them (hub.py). The program that joins them is phaseconv.tts."""

from phaseconv.models.pocket_tts.decoder import (
    DEFAULT_CONFIG,
    MimiStep,
    SlidingWindowAttention,
    build_mimi,
    config_names,
    mimi_step,
    peak_scaled_pcm_error,
    stream_eager,
    window_masks,
)

__all__ = [
    "DEFAULT_CONFIG",
    "MimiStep",
    "SlidingWindowAttention",
    "build_mimi",
    "config_names",
    "mimi_step",
    "peak_scaled_pcm_error",
    "stream_eager",
    "window_masks",
]
