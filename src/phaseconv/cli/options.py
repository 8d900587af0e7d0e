"""The options the commands share, declared once, and the checks of their values."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from phaseconv.errors import PhaseconvError
from phaseconv.targets import TARGETS

TTS_PREFIX = "pocket-tts-tts:"
MODEL_HELP = (
    "a torch.export.save file (.pt2); or module.path:factory naming a Python function that returns "
    "(nn.Module, example_inputs[, dynamic_shapes]), which imports and runs that code; or demo:NAME for a "
    "built-in model (demo:mimi-decoder); or pocket-tts:CONFIG[?frames=N], pocket-tts's Mimi decoder as a streaming "
    "step of N frames a call for a config shipped with pocket-tts (pocket-tts:english_2026-09); lower also takes "
    "pocket-tts-tts:CONFIG, the whole text-to-speech model"
)
TARGET_HELP = (
    f"the CPU the program is for ({', '.join(TARGETS)}): x86-fma3 also runs convolutions as GEMMs (winograd, "
    "im2col), for x86-64 CPUs without AVX-512; x86-avx512 wide 3x3 ones (winograd) and linears weight first, "
    "for those with it; x86-avx512-amd the same without weight-first linears, for AMD ones; host: this one"
)
RULES_HELP = "comma-separated rule names instead of those that pay on {runtime}; none: stock"

Model = Annotated[str, typer.Argument(help=MODEL_HELP)]
NoPrepare = Annotated[
    bool,
    typer.Option(
        "--no-prepare",
        help="export a module as built, without phaseconv.prepare (weight_norm baked, conv settings static)",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="every rewrite decision, node by node")]
Target = Annotated[str, typer.Option(help=TARGET_HELP)]
JsonFile = Annotated[Path | None, typer.Option("--json", help="write the summary as JSON")]
WavFile = Annotated[Path | None, typer.Option("-o", "--output", help="write a WAV file")]
Threads = Annotated[int, typer.Option("--threads", min=1, help="XNNPACK threads")]
Calibration = Annotated[
    Path | None,
    typer.Option("--calibration", help="a folder of .npy files (one input each) or .npz files (one input set each)"),
]
Weights = Annotated[
    Path | None,
    typer.Option(
        "--weights",
        help=f"pocket-tts:CONFIG and {TTS_PREFIX}CONFIG: the model's weights (.safetensors, what a config's "
        "weights_path names) instead of the config's own from the Hugging Face hub or cache",
    ),
]
RandomWeights = Annotated[
    bool,
    typer.Option(
        "--random-weights", help=f"pocket-tts:CONFIG and {TTS_PREFIX}CONFIG: random weights (seeded), for tests"
    ),
]


def integers(text: str, option: str) -> list[int]:
    """'1,2' -> [1, 2], each at least 1."""
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise PhaseconvError(f"{option} takes comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise PhaseconvError(f"{option} takes integers of at least 1, got {text!r}")
    return values


def audio_destination(pcm: bool, output: Path | None, pcm_flag: str = "--pcm") -> None:
    if pcm == (output is not None):
        raise PhaseconvError(f"say where the audio goes: either {pcm_flag} (stdout) or -o out.wav")
