"""Built-in models (random weights, real architectures), reachable by name on the command line:
`demo:NAME` (small, self-contained), `hf:NAME[?arg=value&...]` (the decoders `transformers` builds),
`diffusers:NAME[?arg=value&...]` (the VAE decoders `diffusers` builds), `vocos:NAME[?arg=value&...]`
(the vocoders `vocos` builds) and `pocket-tts:CONFIG` (pocket-tts's Mimi decoder as a streaming step)."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from phaseconv.models import diffusers_vae, transformers_audio, vocos
from phaseconv.models.audio import mimi_decoder, seanet_decoder
from phaseconv.models.image import migan_generator, migan_generator_fp16

Factory = Callable[..., tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]


@dataclass(frozen=True)
class BuiltIn:
    factory: Factory
    description: str
    arguments: dict[str, type] | None = None  # what `?name=value` may set, and its type


DEMO_MODELS: dict[str, Factory] = {
    "mimi-decoder": mimi_decoder,
    "seanet-decoder": seanet_decoder,
    "migan": migan_generator,
    "migan-fp16": migan_generator_fp16,
}

HF_MODELS: dict[str, BuiltIn] = {
    "mimi": BuiltIn(
        transformers_audio.mimi_latents_decoder,
        "Mimi decoder: latents [1, 512, frames] -> 80 ms per frame",
        {"frames": int},
    ),
    "mimi-codes": BuiltIn(
        transformers_audio.mimi_codes_decoder, "MimiModel.decode: codes [1, 32, frames] -> audio", {"frames": int}
    ),
    "encodec": BuiltIn(transformers_audio.encodec_decoder, "EnCodec 24 kHz decoder", {"seconds": float}),
    "dac": BuiltIn(transformers_audio.dac_decoder, "DAC decoder (16 kHz)", {"seconds": float}),
    "hifigan": BuiltIn(transformers_audio.hifigan, "SpeechT5 HiFi-GAN: mel [1, frames, 80] -> audio", {"frames": int}),
    "hifigan-v1": BuiltIn(
        partial(transformers_audio.hifigan, version="v1"), "HiFi-GAN V1 (rates 8, 8, 2, 2)", {"frames": int}
    ),
}

DIFFUSERS_MODELS: dict[str, BuiltIn] = {
    "vae-decoder": BuiltIn(
        diffusers_vae.vae_decoder,
        "Stable Diffusion 1.x VAE decoder: latents [1, 4, n, n] -> image [1, 3, 8n, 8n]",
        {"latents": int},
    ),
    "vae-decoder-small": BuiltIn(
        partial(diffusers_vae.vae_decoder, latents=16, config=diffusers_vae.SMALL),
        "the same VAE decoder, 2 blocks of 32 and 64 channels: latents [1, 4, n, n] -> image [1, 3, 2n, 2n]",
        {"latents": int},
    ),
}

VOCOS_MODELS: dict[str, BuiltIn] = {
    "mel": BuiltIn(
        vocos.mel_vocoder, "Vocos mel-24khz: mel [1, 100, frames] -> 24 kHz audio, an iSTFT head", {"frames": int}
    ),
}

# prefix -> (its models, the package that builds them)
FAMILIES: dict[str, tuple[dict[str, BuiltIn], str]] = {
    "hf": (HF_MODELS, "transformers"),
    "diffusers": (DIFFUSERS_MODELS, "diffusers"),
    "vocos": (VOCOS_MODELS, "vocos"),
}


def catalogue() -> list[tuple[str, str]]:
    """The built-in models as (the name MODEL takes, what it is)."""
    from phaseconv.errors import PhaseconvError

    rows = [
        (f"demo:{name}", " ".join((factory.__doc__ or "").split("\n\n")[0].split()))
        for name, factory in DEMO_MODELS.items()
    ]
    for family, (built_ins, package) in FAMILIES.items():
        for name, model in built_ins.items():
            arguments = "&".join(f"{key}=<{kind.__name__}>" for key, kind in (model.arguments or {}).items())
            rows.append(
                (f"{family}:{name}" + (f"[?{arguments}]" if arguments else ""), f"{model.description} ({package})")
            )
    try:
        from phaseconv.models.pocket_tts import DEFAULT_CONFIG, config_names

        configs = ", ".join(config_names())
        rows.append(
            (
                f"pocket-tts:CONFIG (default {DEFAULT_CONFIG})",
                f"pocket-tts's Mimi decoder as a streaming step; CONFIG: {configs}",
            )
        )
        rows.append(
            (
                f"pocket-tts-tts:CONFIG (default {DEFAULT_CONFIG})",
                "pocket-tts's whole text-to-speech model as one program (lower only; speak it with phaseconv tts)",
            )
        )
    except PhaseconvError as missing:
        rows.append(("pocket-tts:CONFIG", str(missing)))
    return rows
