"""The programs the C++ runner's tests speak with (x86 and ARM64), lowered once per test run."""

from pathlib import Path

import torch

from phaseconv.models.pocket_tts import hub
from phaseconv.tts.build import lower_tts
from phaseconv.tts.source import Model, build_tts
from phaseconv.tts.stand_ins import stand_in_tokenizer, stand_in_voice
from phaseconv.tts.voices import state_of
from tests.shared import made_once

CAPACITY = 256


def runner_model(config: str, folder: Path) -> Model:
    """The config with random weights (seed 0), a stand-in tokenizer and a built-in voice `alba` (the
    state of the stand-in voice); the tokenizer, the voice's audio and its state written in `folder`."""
    from pocket_tts.models.model_state import export_model_state

    tokenizer = stand_in_tokenizer(folder / "tokenizer.json", hub.load_config(config).flow_lm.lookup_table.n_bins)
    wav = stand_in_voice(folder / "voice.wav")
    tts = build_tts(config, tokenizer=tokenizer)
    with torch.no_grad():
        state = tts.get_state_for_audio_prompt(wav, truncate=True)
    export_model_state(state, folder / "voice.safetensors")
    return Model(tts, config, "random (seed 0)", True, tokenizer, {"alba": state_of(state, "the stand-in")})


def runner_program(tmp_path_factory, config: str) -> Path:
    """runner_model's program at CAPACITY positions, fp32: the folder of tts.pte and runner_model's files."""

    def make(folder: Path):
        lowered, _ = lower_tts(runner_model(config, folder), capacity=CAPACITY)
        lowered.save(folder / "tts.pte")

    return made_once(tmp_path_factory, f"runner-{config}", make)
