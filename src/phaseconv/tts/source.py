"""pocket-tts's TTSModel as its users load it: a config's weights, tokenizer and built-in voices
from the hub or its cache (models/pocket_tts/hub.py), other weights, or random ones, built by
pocket-tts's own code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts import hub
from phaseconv.models.pocket_tts.decoder import check_state
from phaseconv.tts import voices as voice_states

DEFAULT_TTS_CONFIG = hub.DEFAULT_LANGUAGE


def load_tts_config(config: str):
    """pocket-tts's Config for a shipped config, its weights and tokenizer paths cleared (the caller
    gives the model's weights and tokenizer)."""
    settings = hub.load_config(config)
    settings.weights_path = settings.weights_path_without_voice_cloning = None
    settings.flow_lm.weights_path = settings.mimi.weights_path = None
    return settings


def load_tokenizer(path: Path, n_bins: int):
    """pocket-tts's tokenizer for a sentencepiece `.model` or a tokenizers `.json` file, whose
    vocabulary must have the config's `n_bins` pieces."""
    from pocket_tts.modules.text_conditioner import build_tokenizer

    if not path.is_file():
        raise PhaseconvError(f"no such tokenizer file: {path}")
    kind = tokenizer_kind(path)
    try:
        return build_tokenizer(n_bins, str(path), kind)
    except AssertionError as error:  # pocket-tts asserts the vocabulary size
        raise PhaseconvError(f"{path}: {error} (the config's n_bins)") from None
    except Exception as error:
        raise PhaseconvError(f"{path} is not a {kind} tokenizer: {type(error).__name__}: {error}") from None


def tokenizer_kind(path: Path) -> str:
    return "tokenizers" if path.suffix == ".json" else "sentencepiece"


def _built(config, **weights_paths):
    """pocket-tts's TTSModel for a Config, built by its own loader (weights from the paths given, or
    left as built), its tokenizer left out (read here from a local file)."""
    from pocket_tts.models.tts_model import TTSModel

    for name, value in weights_paths.items():
        setattr(config, name, value)
    with mock.patch("pocket_tts.modules.text_conditioner.build_tokenizer", lambda *args, **kwargs: None):
        return TTSModel._from_pydantic_config_with_weights(
            config, config.default_temperature, 1, None, config.default_eos_threshold
        )


def build_tts(config: str = DEFAULT_TTS_CONFIG, weights: Path | None = None, tokenizer: Path | None = None, seed=0):
    """pocket-tts's TTSModel for a shipped config, built by its own code: random weights (seeded) or
    those of `weights` (the whole model's .safetensors: flow_lm.* and mimi.* keys), and the tokenizer
    of `tokenizer` (none: the model can run but not read text)."""
    hub._pocket_tts()
    settings = load_tts_config(config)
    torch.manual_seed(seed)
    tts = _built(settings)
    if weights is not None:
        load_tts_weights(tts, weights, config)
    else:  # pocket-tts leaves it zero for its weights file to fill: random, or every voice would be silence
        projection = tts.flow_lm.speaker_proj_weight
        torch.nn.init.normal_(projection.data, std=projection.shape[1] ** -0.5)
    if tokenizer is not None:
        tts.flow_lm.conditioner.tokenizer = load_tokenizer(tokenizer, settings.flow_lm.lookup_table.n_bins)
    return tts.eval()


def load_tts_weights(tts: nn.Module, path: Path, config: str) -> None:
    """The whole TTSModel state dict from `path` (what pocket-tts's `weights_path` points to)."""
    import safetensors.torch

    if not path.is_file():
        raise PhaseconvError(f"no such weights file: {path}")
    try:
        state = safetensors.torch.load_file(path)
    except Exception as error:
        raise PhaseconvError(f"cannot read {path} as safetensors: {type(error).__name__}: {error}") from None
    check_state(tts.state_dict(), state, path, config)
    tts.load_state_dict(state, strict=True)


@dataclass
class Model:
    """A pocket-tts model to lower, and where its parts came from."""

    tts: nn.Module
    config: str
    weights: str  # in words
    voice_cloning: bool
    tokenizer: Path | None = None
    voices: dict[str, torch.Tensor] = field(default_factory=dict)  # built-in voice -> state


def load_model(
    config: str = DEFAULT_TTS_CONFIG,
    weights: Path | None = None,
    tokenizer: Path | None = None,
    random_weights: bool = False,
    voices: list[str] | None = None,
    seed: int = 0,
) -> Model:
    """The model as pocket-tts loads it for `config` (a config or language name): the config's weights,
    tokenizer and built-in voices from the hub or its cache (hub.py); or the weights of `weights`, or
    random ones (`random_weights`, seeded), which built-in voices do not fit (pocket-tts refuses them
    with custom weights). `tokenizer` replaces the config's; `voices` picks built-in voices by name."""
    hub.config_path(config)  # an unknown name first
    if weights is not None and random_weights:
        raise PhaseconvError("give --weights FILE or --random-weights, not both")
    if voices and (weights is not None or random_weights):
        raise PhaseconvError(
            "built-in voices are states of the config's released weights: --voices goes without --weights "
            "and --random-weights (pocket-tts refuses them with other weights)"
        )
    if random_weights:
        return random_model(config, tokenizer or hub.tokenizer(config), seed)
    if weights is not None:
        tokenizer = tokenizer or hub.tokenizer(config)
        return Model(build_tts(config, weights, tokenizer), config, weights.name, True, tokenizer)
    found = hub.weights(config)
    tokenizer = tokenizer or hub.tokenizer(config)
    tts = _built(hub.load_config(config), weights_path=str(found.path), weights_path_without_voice_cloning=None)
    tts.flow_lm.conditioner.tokenizer = load_tokenizer(tokenizer, tts.config.flow_lm.lookup_table.n_bins)
    states = {name: voice_states.read_state(path) for name, path in hub.voices(config, voices).items()}
    return Model(tts.eval(), config, found.source, found.voice_cloning, tokenizer, states)


def random_model(config: str = DEFAULT_TTS_CONFIG, tokenizer: Path | None = None, seed: int = 0) -> Model:
    """The model with random weights (seeded): for tests and benchmarks."""
    return Model(build_tts(config, None, tokenizer, seed), config, f"random (seed {seed})", True, tokenizer)
