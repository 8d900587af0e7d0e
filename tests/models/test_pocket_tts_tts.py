"""pocket-tts's whole text-to-speech model as one ExecuTorch program, spoken by phaseconv's runner:
the same frames and audio as pocket-tts's own generate_audio with the same weights, tokenizer,
voice and noise."""

import math

import pytest
import torch

from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts.program import build_tts, lower_tts, tts_programs
from phaseconv.models.pocket_tts.stand_ins import stand_in_tokenizer, stand_in_voice
from phaseconv.tts import Speaker, SpeechProgram, SpeechReport, Voice

pytest.importorskip("pocket_tts")

CONFIG = "english_2m_2026-10"
TEXT = "Hello world, this is a test. It has two sentences!"
# Lowering the whole program takes about 4 minutes: these run with -m slow (in CI).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tts")
    tokenizer = stand_in_tokenizer(folder / "tokenizer.model", 4000)
    lower_tts(CONFIG, capacity=256).save(folder / "tts.pte")
    return folder / "tts.pte", tokenizer, stand_in_voice(folder / "voice.wav")


def speak(files, text=TEXT, temperature=0.0, seed=0, voice=True, program=None, decoder=None, wav=None):
    path, tokenizer, wav = *files[:2], wav or files[2]
    program = program or SpeechProgram(path)
    speaker = Speaker(program, tokenizer, temperature, seed)
    report = SpeechReport(0, 0, 24000, 1920, program.load_ms, 0.0, 0.0, 0.0)
    speaker.set_voice(Voice(wav, 24000, 1920) if voice else None)
    frames = []
    speaker.speak(text, lambda pcm: frames.append(pcm.clone()), report, decoder)
    return torch.cat(frames), report


def pocket_tts_audio(files, text=TEXT, temperature=0.0, seed=0, wav=None):
    tokenizer, wav = files[1], wav or files[2]
    tts = build_tts(CONFIG, tokenizer=tokenizer)
    tts.temp = temperature
    torch.manual_seed(seed)
    with torch.no_grad():
        return tts.generate_audio(tts.get_state_for_audio_prompt(wav), text)


@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (0.3, 7)], ids=["temperature-0", "seeded"])
def test_speaks_as_pocket_tts(files, temperature, seed):
    audio, report = speak(files, temperature=temperature, seed=seed)
    expected = pocket_tts_audio(files, temperature=temperature, seed=seed)
    assert audio.shape == expected.shape and report.frames == expected.numel() // 1920
    # float rounding: the runtime's products against eager's, through a 4-layer decoder transformer
    assert float((audio - expected).abs().max()) * 32768 < 0.5


def test_next_utterance_without_reloading_and_same_seed_same_audio(files):
    program = SpeechProgram(files[0])
    first, _ = speak(files, temperature=0.3, seed=3, program=program)
    again, _ = speak(files, temperature=0.3, seed=3, program=program)
    other, _ = speak(files, temperature=0.3, seed=4, program=program)
    assert torch.equal(first, again)
    assert not torch.equal(first[: min(len(first), len(other))], other[: min(len(first), len(other))])


def test_decoder_in_a_second_process_gives_the_same_audio_utterance_after_utterance(files):
    from phaseconv.tts import DecoderProcess

    inline, _ = speak(files, temperature=0.3, seed=2)
    decoder = DecoderProcess(files[0])
    try:
        for _ in range(2):  # the decoder's state reset for each chunk, the frames in order
            piped, _ = speak(files, temperature=0.3, seed=2, decoder=decoder)
            assert torch.equal(piped, inline)
    finally:
        decoder.close()


def test_long_text_is_chunked_as_pocket_tts_chunks_it(files):
    text = " ".join(["This sentence keeps the chunk busy for a while longer than one."] * 5)
    audio, report = speak(files, text)
    expected = pocket_tts_audio(files, text)
    assert report.chunks > 1 and audio.shape == expected.shape
    assert float((audio - expected).abs().max()) * 32768 < 0.5


def test_a_voice_longer_than_a_prompt_call_is_prompted_in_parts(files, tmp_path):
    """11 s of voice: 139 positions of conditioning, more than one call of prompt takes (128)."""
    wav = stand_in_voice(tmp_path / "long.wav", seconds=11.0)
    assert SpeechProgram(files[0]).settings["prompt_tokens_per_call"] < 1 + 11.3 * 12.5
    audio, _ = speak(files, "Hello there.", wav=wav)
    expected = pocket_tts_audio(files, "Hello there.", wav=wav)
    assert audio.shape == expected.shape
    assert float((audio - expected).abs().max()) * 32768 < 0.5


def test_without_a_voice(files):
    audio, report = speak(files, voice=False)
    assert report.frames > 0 and audio.numel() == report.frames * 1920 and torch.isfinite(audio).all()


def test_capacity_stops_a_chunk_and_says_so(files):
    """With EOS never reached, a chunk runs to pocket-tts's maximum of frames, or to the cache's end
    (256 positions here) when that comes first; the report counts the chunks the cache stopped."""
    path, tokenizer, wav = files
    program = SpeechProgram(path)
    for text, capped in (("Short.", 0), ("word " * 40, 1)):
        speaker = Speaker(program, tokenizer, 0.0)
        speaker.settings = {**speaker.settings, "eos_threshold": float("inf")}
        speaker.set_voice(Voice(wav, 24000, 1920))
        report = SpeechReport(0, 0, 24000, 1920, 0.0, 0.0, 0.0, 0.0)
        speaker.speak(text, lambda pcm: None, report)
        tokens = speaker.tokenizer(speaker.chunks(text)[0][0]).shape[1]
        maximum = math.ceil((tokens / 3 + 2) * 12.5)
        room = 256 - speaker.voice_positions - tokens
        assert report.capped_chunks == capped and report.eos_frames == [None]
        assert report.frames == min(maximum, room)


def test_bad_tokenizer_and_voice(files, tmp_path):
    path, tokenizer, _ = files
    small = stand_in_tokenizer(tmp_path / "small.model", 1000)
    with pytest.raises(PhaseconvError, match="vocab size=1000 but nbins=4000"):
        Speaker(SpeechProgram(path), small)
    noise = tmp_path / "noise.wav"
    noise.write_bytes(b"RIFF not really")
    with pytest.raises(PhaseconvError, match="is not audio"):
        Voice(noise, 24000, 1920)
    with pytest.raises(PhaseconvError, match="the text is empty"):
        speak(files, "   ")


@pytest.mark.parametrize("config, measured_snr", [(CONFIG, 38.6), ("english_2026-09", 35.0)])
@torch.no_grad()
def test_int8_decoder_on_the_language_models_own_latents(config, measured_snr):
    """--quantize-decoder int8: calibrated on the LM's latents (seed 0), it decodes others (seed 5)
    within 2 dB of the SNR measured against the fp32 decoder in eager, and the same after a reset.
    english_2026-09's int8 decode method holds none of the decoder's empty states; its reset does."""
    from phaseconv.lowering import lower
    from phaseconv.models.pocket_tts.decoder import MimiStep
    from phaseconv.models.pocket_tts.program import Decode, lm_latents
    from phaseconv.quantize import snr_db
    from phaseconv.runtimes.executorch import LoadedProgram

    tts = build_tts(config)
    programs, settings = tts_programs(tts, config, capacity=64, quantize_decoder="int8")
    assert settings["quantize_decoder"] == "int8"
    assert any("quantize_per_tensor" in str(node.target) for node in programs["decode"].graph.nodes)
    program = LoadedProgram(lower({name: programs[name] for name in ("decode", "reset_decoder")}).buffer)
    latents = lm_latents(tts, frames=50, seed=5)
    decode = Decode(tts, MimiStep(tts.mimi)).eval()
    expected = torch.cat([decode(latent) for latent in latents], dim=-1)
    utterances = []
    for _ in range(2):
        program.run((), "reset_decoder")
        utterances.append(torch.cat([program.run((latent,), "decode")[0] for latent in latents], dim=-1))
    assert torch.equal(utterances[0], utterances[1])
    assert snr_db(expected, utterances[0]) > measured_snr - 2
