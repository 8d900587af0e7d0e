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


def _built(settings, **weights_paths):
    """pocket-tts's TTSModel for a copy of `settings` (a Config) with `weights_paths`, built by its own
    loader (weights from the paths given, or left as built), its tokenizer left out (read here from a
    local file)."""
    from pocket_tts.models.tts_model import TTSModel

    settings = settings.model_copy(deep=True)
    for name, value in weights_paths.items():
        setattr(settings, name, value)
    with mock.patch("pocket_tts.modules.text_conditioner.build_tokenizer", lambda *args, **kwargs: None):
        return TTSModel._from_pydantic_config_with_weights(
            settings, settings.default_temperature, 1, None, settings.default_eos_threshold
        )


def build_tts(config: str = DEFAULT_TTS_CONFIG, weights: Path | None = None, tokenizer: Path | None = None, seed=0):
    """pocket-tts's TTSModel for a shipped config, built by its own code: random weights (seeded) or
    those of `weights` (the whole model's .safetensors: flow_lm.* and mimi.* keys), and the tokenizer
    of `tokenizer` (none: the model can run but not read text)."""
    hub._pocket_tts()
    return _build(hub.load_config(config), config, weights, tokenizer, seed)


def _build(settings, config: str, weights: Path | None, tokenizer: Path | None, seed: int):
    torch.manual_seed(seed)
    unloaded = settings.model_copy(deep=True)
    unloaded.weights_path = unloaded.weights_path_without_voice_cloning = None
    unloaded.flow_lm.weights_path = unloaded.mimi.weights_path = None
    tts = _built(unloaded)
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
    default_voice: str | None = None  # the language's, where among `voices`


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
    if weights is not None and random_weights:
        raise PhaseconvError("give --weights FILE or --random-weights, not both")
    if voices and (weights is not None or random_weights):
        raise PhaseconvError(
            "built-in voices are states of the config's released weights: --voices goes without --weights "
            "and --random-weights (pocket-tts refuses them with other weights)"
        )
    files = hub.resolve(config, weights is None and not random_weights, tokenizer, voices)
    return from_files(files, weights, seed)


def from_files(files: hub.ConfigFiles, weights: Path | None = None, seed: int = 0) -> Model:
    """The model of a config's files: its released weights and voices where `files` has them, else
    the weights of `weights`, else random ones (seeded)."""
    if files.weights is None:
        tts = _build(files.settings, files.name, weights, files.tokenizer, seed)
        source = weights.name if weights is not None else f"random (seed {seed})"
        return Model(tts, files.name, source, True, files.tokenizer)
    tts = _built(files.settings, weights_path=str(files.weights.path), weights_path_without_voice_cloning=None)
    tts.flow_lm.conditioner.tokenizer = load_tokenizer(files.tokenizer, files.settings.flow_lm.lookup_table.n_bins)
    states = {name: voice_states.read_state(path) for name, path in files.voices.items()}
    return Model(
        tts.eval(),
        files.name,
        files.weights.source,
        files.weights.voice_cloning,
        files.tokenizer,
        states,
        files.default_voice,
    )


def random_model(config: str = DEFAULT_TTS_CONFIG, tokenizer: Path | None = None, seed: int = 0) -> Model:
    """The model with random weights (seeded): for tests and benchmarks."""
    return Model(build_tts(config, None, tokenizer, seed), config, f"random (seed {seed})", True, tokenizer)
