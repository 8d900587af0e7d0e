"""A pocket-tts config's files as pocket-tts gets them: its weights, tokenizer and built-in voices
through its own `download_if_necessary` (Hugging Face's hub and cache; `HF_HUB_OFFLINE` honoured).

pocket-tts's configs name two weights files: `weights_path`, the model with voice cloning (gated: a
user accepts its terms on the hub), and `weights_path_without_voice_cloning` (public); `TTSModel`
falls back from the first to the second. Built-in voices are voice states computed with the released
weights (`languages/CONFIG/embeddings/NAME.safetensors`). A file already in the cache is taken from
there before the hub is asked, so that an offline machine does not wait for the network's retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from phaseconv.errors import PhaseconvError

DEFAULT_LANGUAGE = "english"  # pocket-tts's default


@dataclass(frozen=True)
class Weights:
    path: Path
    voice_cloning: bool
    source: str  # in words, for the summary


def _pocket_tts():
    try:
        import pocket_tts
    except ImportError:
        raise PhaseconvError("the pocket-tts models need `pip install pocket-tts`") from None
    return pocket_tts


def config_names() -> list[str]:
    """The configs (and languages, which are configs too) shipped inside the pocket-tts package."""
    folder = Path(_pocket_tts().__file__).parent / "config"
    return sorted(path.stem for path in folder.glob("*.yaml"))


def config_path(name: str) -> Path:
    from pocket_tts.utils.config import CONFIGS_DIR

    if name not in config_names():
        raise PhaseconvError(f"unknown pocket-tts config {name!r}; shipped: {', '.join(config_names())}")
    return CONFIGS_DIR / f"{name}.yaml"


def load_config(name: str):
    """pocket-tts's Config for a shipped config or language name."""
    from pocket_tts.utils.config import load_config as load

    return load(config_path(name))


def _split(hub_path: str) -> tuple[str, str, str | None]:
    """hf://owner/repo/file@revision -> (repo, file, revision), as download_if_necessary splits it."""
    parts = hub_path.removeprefix("hf://").split("/")
    filename, _, revision = "/".join(parts[2:]).partition("@")
    return "/".join(parts[:2]), filename, revision or None


def cached(hub_path: str) -> Path | None:
    """The file in the Hugging Face cache, without asking the hub."""
    from huggingface_hub import try_to_load_from_cache

    repo, filename, revision = _split(hub_path)
    found = try_to_load_from_cache(repo, filename, revision=revision)
    return Path(found) if isinstance(found, str) else None


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def download(hub_path: str) -> Path:
    """pocket-tts's download_if_necessary: the cache's copy, else the hub's (huggingface_hub's errors)."""
    from pocket_tts.utils.utils import download_if_necessary

    return cached(hub_path) or download_if_necessary(hub_path)


def missing(hub_path: str, what: str, flags: str) -> PhaseconvError:
    from huggingface_hub import constants

    reach = "HF_HUB_OFFLINE is set" if offline() else "the hub did not give it"
    return PhaseconvError(
        f"{what} {hub_path} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {reach}: "
        f"connect to the hub, or give {flags}"
    )


def weights(settings, config: str) -> Weights:
    """The config's weights, the voice-cloning ones where the cache or the hub gives them (the hub
    only to a user who accepted their terms), else those without voice cloning, as pocket-tts falls back."""
    cloning, public = settings.weights_path, settings.weights_path_without_voice_cloning
    if cloning and cached(cloning):
        return Weights(cached(cloning), True, "the config's, with voice cloning")
    if cloning and not offline():
        try:
            return Weights(download(cloning), True, "the config's, with voice cloning")
        except Exception:  # gated, or out of reach: pocket-tts falls back too
            pass
    if public is None:
        raise missing(cloning, f"pocket-tts {config}'s weights", "--weights FILE or --random-weights")
    try:
        return Weights(download(public), False, "the config's, without voice cloning")
    except Exception:
        raise missing(public, f"pocket-tts {config}'s weights", "--weights FILE or --random-weights") from None


def tokenizer(settings, config: str) -> Path:
    """The config's tokenizer file (a sentencepiece .model or a tokenizers .json)."""
    hub_path = settings.flow_lm.lookup_table.tokenizer_path
    if not hub_path.startswith(("hf://", "http://", "https://")):
        return Path(hub_path)
    try:
        return download(hub_path)
    except Exception:
        raise missing(hub_path, f"pocket-tts {config}'s tokenizer", "--tokenizer FILE") from None


@dataclass(frozen=True)
class ConfigFiles:
    """A shipped config as pocket-tts reads it, its files found once: the settings (pocket-tts's
    Config), the tokenizer, the released weights and built-in voices where they were asked for."""

    name: str
    settings: object
    tokenizer: Path
    weights: Weights | None = None
    voices: dict[str, Path] = field(default_factory=dict)
    default_voice: str | None = None  # pocket-tts's for the language, where among `voices`


def resolve(
    config: str, released_weights: bool, tokenizer_file: Path | None = None, voice_names: list[str] | None = None
) -> ConfigFiles:
    """`config`'s files from the cache or the hub: its tokenizer (unless `tokenizer_file` replaces
    it) and, with `released_weights`, its weights and built-in voices (`voice_names`: those only)."""
    settings = load_config(config)
    if not released_weights:
        return ConfigFiles(config, settings, tokenizer_file or tokenizer(settings, config))
    released = weights(settings, config)
    found = tokenizer_file or tokenizer(settings, config)
    states, default = voices(config, voice_names), default_voice(config)
    return ConfigFiles(config, settings, found, released, states, default if default in states else None)


def builtin_voice_names() -> list[str]:
    from pocket_tts.utils.utils import _ORIGINS_OF_PREDEFINED_VOICES

    return list(_ORIGINS_OF_PREDEFINED_VOICES)


def default_voice(config: str) -> str:
    from pocket_tts.default_parameters import get_default_voice_for_language

    return get_default_voice_for_language(config)


def voices(config: str, names: list[str] | None = None) -> dict[str, Path]:
    """The built-in voice states of `config` that the cache or the hub has, by name (`names`: those
    only, each required). The hub is asked only when it answered for the first voice tried."""
    from pocket_tts.utils.utils import get_predefined_voice

    wanted = names if names is not None else builtin_voice_names()
    unknown = [name for name in wanted if name not in builtin_voice_names()]
    if unknown:
        raise PhaseconvError(f"no built-in voice {unknown[0]!r}; pocket-tts has {', '.join(builtin_voice_names())}")
    found, reachable = {}, not offline()
    for name in sorted(wanted, key=lambda n: n != default_voice(config)):  # the default voice first
        hub_path = get_predefined_voice(language=config, name=name)
        path = cached(hub_path)
        if path is None and reachable:
            try:
                path = download(hub_path)
            except Exception as error:
                from huggingface_hub.errors import EntryNotFoundError

                reachable = isinstance(error, EntryNotFoundError) and not isinstance(error, FileNotFoundError)
        if path is not None:
            found[name] = path
        elif names is not None:
            raise missing(hub_path, f"the voice {name}", "other --voices")
    return found
