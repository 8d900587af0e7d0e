"""sherpa-onnx, the peer benchmarks/tts.py measures, on files phaseconv exports from pocket-tts's own
modules (models/pocket_tts/sherpa_onnx.py): the same weights speak pocket-tts's audio."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts import hub
from phaseconv.tts.source import build_tts
from phaseconv.tts.stand_ins import stand_in_tokenizer, stand_in_voice

sherpa_onnx = pytest.importorskip("sherpa_onnx")
CONFIG = "english"  # sherpa-onnx's runner takes text embeddings 1024 wide only
FADE_IN = 24000 // 200  # pocket-tts fades its first 5 ms in; sherpa-onnx does not


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sherpa")
    tokenizer = stand_in_tokenizer(folder / "tokenizer.model", hub.load_config(CONFIG).flow_lm.lookup_table.n_bins)
    tts = build_tts(CONFIG, tokenizer=tokenizer)
    tts.temp, tts.eos_threshold = 0.0, math.inf
    return tts, tokenizer, stand_in_voice(folder / "voice.wav", seconds=2.0), folder


def test_sherpa_onnx_speaks_pocket_tts_audio_at_temperature_0(model):
    """pocket-tts's own generate_audio and sherpa-onnx on the exported files, the same voice audio,
    text and frames (end of speech off in both): the same samples within 1 step of 16-bit PCM, after
    the 5 ms pocket-tts fades in."""
    from pocket_tts.models.text_chunking import prepare_text_prompt

    from phaseconv.models.pocket_tts.sherpa_onnx import engine, export, generation, voice_audio

    tts, tokenizer, wav, folder = model
    text = "Hello there, how are you?"
    with torch.no_grad():
        expected = tts.generate_audio(tts.get_state_for_audio_prompt(wav), text).numpy()
    frames = len(expected) // tts.mimi.frame_size
    prepared, _ = prepare_text_prompt(text, tts.pad_with_spaces_for_short_inputs, tts.remove_semicolons)
    speaker = engine(export(tts, tokenizer, folder, end_of_speech=False), threads=1)
    voice = voice_audio(wav, tts.sample_rate)
    spoken = np.array(
        speaker.generate(prepared, generation(voice, tts.sample_rate, frames, tts.sampler_decode_steps)).samples
    )
    assert spoken.shape == expected.shape
    steps = np.abs(np.round(spoken * 32767) - np.round(expected * 32767))[FADE_IN:]
    assert steps.max() <= 1


def test_the_exporter_names_what_sherpa_onnx_cannot_run(model, tmp_path):
    from phaseconv.models.pocket_tts.sherpa_onnx import export

    tts, tokenizer, _, _ = model
    with pytest.raises(PhaseconvError, match="sentencepiece"):
        export(tts, tmp_path / "tokenizer.json", tmp_path)
    with pytest.raises(PhaseconvError, match="1024 wide"):
        export(build_tts("english_2m_2026-10"), tokenizer, tmp_path)
