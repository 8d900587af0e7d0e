"""pocket-tts's whole text-to-speech model as one ExecuTorch program, spoken by phaseconv's runner:
the same frames and audio as pocket-tts's own generate_audio with the same weights, tokenizer,
voice and noise; voices as audio or as states; chunks that never stop at the cache's end."""

import dataclasses

import pytest
import torch

from phaseconv.errors import PhaseconvError
from phaseconv.tts.build import lower_tts, tts_programs
from phaseconv.tts.decoding import DecoderProcess
from phaseconv.tts.loaded import SpeechProgram
from phaseconv.tts.source import build_tts, random_model
from phaseconv.tts.speaker import Speaker, SpeechReport
from phaseconv.tts.stand_ins import stand_in_tokenizer, stand_in_voice
from phaseconv.tts.voices import AudioVoice, read_state, write_state

pytest.importorskip("pocket_tts")

CONFIG = "english_2m_2026-10"
TEXT = "Hello world, this is a test. It has two sentences!"
CAPACITY = 256
# Lowering the whole program takes minutes: these run with -m slow (in CI).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tts")
    tokenizer = stand_in_tokenizer(folder / "tokenizer.model", 4000)
    lowered, _ = lower_tts(random_model(CONFIG, tokenizer), capacity=CAPACITY)
    lowered.save(folder / "tts.pte")
    return folder / "tts.pte", tokenizer, stand_in_voice(folder / "voice.wav")


def speak(files, text=TEXT, temperature=0.0, seed=0, voice="audio", program=None, decoder=None):
    """The runner's audio: `voice` "audio" (the stand-in voice), None, a Path (.wav or .safetensors)."""
    program = program or SpeechProgram(files[0])
    speaker = Speaker(program, temperature, seed)
    report = SpeechReport(0, 0, 24000, 1920, program.load_ms)
    path = files[2] if voice == "audio" else voice
    if path is not None and path.suffix == ".wav":
        path = AudioVoice.read(path, 24000, 1920)
    speaker.set_voice(path)
    frames = []
    speaker.speak(text, lambda pcm: frames.append(pcm.clone()), report, decoder)
    return torch.cat(frames), report


def pocket_tts_audio(files, text=TEXT, temperature=0.0, seed=0, voice=None, truncate=False):
    """pocket-tts's own generate_audio with the program's weights and tokenizer."""
    tts = build_tts(CONFIG, tokenizer=files[1])
    tts.temp = temperature
    torch.manual_seed(seed)
    with torch.no_grad():
        return tts.generate_audio(tts.get_state_for_audio_prompt(voice or files[2], truncate=truncate), text)


def assert_same_audio(audio, expected):
    assert audio.shape == expected.shape
    # float rounding: the runtime's products against eager's, through a 4-layer decoder transformer
    assert float((audio - expected).abs().max()) * 32768 < 0.5


@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (0.3, 7)], ids=["temperature-0", "seeded"])
def test_speaks_as_pocket_tts(files, temperature, seed):
    audio, report = speak(files, temperature=temperature, seed=seed)
    assert_same_audio(audio, pocket_tts_audio(files, temperature=temperature, seed=seed))
    assert report.frames == audio.numel() // 1920
    assert report.decode_calls < report.frames  # several frames a call once the audio runs ahead


def test_a_voice_state_speaks_as_pocket_tts_and_exports_as_it_does(files, tmp_path):
    """--export-voice writes the state pocket-tts's export-voice writes for the audio (the runtime's
    keys and values against eager's); that file, given back as a voice, speaks as pocket-tts does."""
    from pocket_tts.models.model_state import export_model_state

    program = SpeechProgram(files[0])
    speaker = Speaker(program, 0.0)
    speaker.set_voice(AudioVoice.read(files[2], 24000, 1920))
    exported = tmp_path / "voice.safetensors"
    write_state(speaker.voice_state(), exported)
    tts = build_tts(CONFIG, tokenizer=files[1])
    with torch.no_grad():
        export_model_state(tts.get_state_for_audio_prompt(files[2], truncate=True), tmp_path / "pocket.safetensors")
    expected = read_state(tmp_path / "pocket.safetensors")
    torch.testing.assert_close(read_state(exported), expected, rtol=1e-3, atol=1e-3)  # the runtime's float rounding
    audio, report = speak(files, voice=tmp_path / "pocket.safetensors", program=program)
    assert_same_audio(audio, pocket_tts_audio(files, voice=tmp_path / "pocket.safetensors"))


def test_next_utterance_without_reloading_and_same_seed_same_audio(files):
    program = SpeechProgram(files[0])
    first, _ = speak(files, temperature=0.3, seed=3, program=program)
    again, _ = speak(files, temperature=0.3, seed=3, program=program)
    other, _ = speak(files, temperature=0.3, seed=4, program=program)
    assert torch.equal(first, again)
    assert not torch.equal(first[: min(len(first), len(other))], other[: min(len(first), len(other))])


def test_decoder_in_a_second_process_gives_the_same_audio_utterance_after_utterance(files):
    """It decodes several frames a call (decode_N) once the audio runs ahead: the audio of one frame
    at a time, within float rounding."""
    inline, _ = speak(files, temperature=0.3, seed=2)
    decoder = DecoderProcess(files[0])
    try:
        for _ in range(2):  # the decoder's state reset for each chunk, the frames in order
            piped, report = speak(files, temperature=0.3, seed=2, decoder=decoder)
            assert piped.shape == inline.shape and float((piped - inline).abs().max()) * 32768 < 0.5
            assert report.decode_calls <= report.frames
    finally:
        decoder.close()


def test_the_utterances_first_latent_in_a_second_process_returns_with_its_audio(files):
    """On one core the next frame would share the core with the decoder's first call: that call's audio
    is out before decode returns; later latents are not waited for."""
    latent = torch.zeros(1, 1, SpeechProgram(files[0]).settings.latent_dim)
    decoder, delivered = DecoderProcess(files[0]), []
    try:
        decoder.start(lambda pcm, *_: delivered.append(pcm))
        decoder.reset()
        decoder.decode(latent, first_of_chunk=True)
        assert len(delivered) == 1
        decoder.finish()
    finally:
        decoder.close()


def test_several_frames_a_call_decode_as_many_calls_of_one_and_leave_their_state(files):
    from phaseconv.tts.contract import decode_method

    program = SpeechProgram(files[0])
    latents = torch.randn(1, 13, 32, generator=torch.Generator().manual_seed(0))
    program.reset_decoder()
    expected = torch.cat([program.decode(latents[:, i : i + 1])[0].reshape(-1) for i in range(13)])
    program.reset_decoder()
    heard = [program.decode_frames(latents[:, 0:4]), program.decode_frames(latents[:, 4:6])]
    heard += [program.decode_frames(latents[:, 6:10]), program.decode(latents[:, 10:11])[0].reshape(1, -1)]
    heard += [program.decode_frames(latents[:, 11:13])]
    heard = torch.cat([frames.reshape(-1) for frames in heard])
    assert program.settings.decode_frames == [1, 2, 4] and decode_method(4) == "decode_4"
    assert float((heard - expected).abs().max()) * 32768 < 0.5  # float rounding


def test_long_text_is_chunked_as_pocket_tts_chunks_it(files):
    text = " ".join(["This sentence keeps the chunk busy for a while longer than one."] * 5)
    audio, report = speak(files, text)
    assert report.chunks > 1 and report.split_chunks == 0
    assert_same_audio(audio, pocket_tts_audio(files, text))


def test_a_voice_longer_than_a_prompt_call_is_prompted_in_parts(files, tmp_path):
    """6 s of voice: 77 positions of conditioning, more than a prompt call takes (32)."""
    wav = stand_in_voice(tmp_path / "long.wav", seconds=6.0)
    audio, _ = speak(files, "Hello there.", voice=wav)
    assert_same_audio(audio, pocket_tts_audio(files, "Hello there.", voice=wav))


def test_a_prompt_call_takes_one_token_to_a_full_call_as_eager_does(files):
    """The prompt methods' token count is dynamic: a call of 1, then one of PROMPT_TOKENS after it,
    give the hidden states of the eager steps on the same weights."""
    from phaseconv.models.pocket_tts.language_model import Prompt, with_cache
    from phaseconv.tts.contract import PROMPT_TOKENS

    program = SpeechProgram(files[0])
    flow_lm = with_cache(random_model(CONFIG, files[1]).tts.flow_lm, CAPACITY)
    embeddings = torch.randn(1, 1 + PROMPT_TOKENS, flow_lm.dim, generator=torch.Generator().manual_seed(0))
    program.clear_cache()
    for first, count in [(0, 1), (1, PROMPT_TOKENS)]:
        part, places = embeddings[:, first : first + count], torch.arange(first, first + count)
        last = first + count - 1
        (actual,) = program.prompt(part, places, last)
        with torch.no_grad():
            expected = Prompt(flow_lm, program.settings.prompt_block(last))(part, places)
        assert actual.shape == expected.shape
        torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)  # the runtime's float rounding


def test_the_first_frame_method_takes_one_token_to_a_full_call_as_eager_does(files):
    """first_frame_B: a chunk's last tokens (1 to PROMPT_TOKENS, a dynamic size) and its first frame in one
    call give the frame's latent and EOS logit of the eager FirstFrame on the same weights."""
    from phaseconv.models.pocket_tts.language_model import FirstFrame, with_cache
    from phaseconv.tts.contract import PROMPT_TOKENS

    program = SpeechProgram(files[0])
    flow_lm = with_cache(random_model(CONFIG, files[1]).tts.flow_lm, CAPACITY)
    embeddings = torch.randn(1, PROMPT_TOKENS, flow_lm.dim, generator=torch.Generator().manual_seed(0))
    noise = torch.zeros(1, flow_lm.ldim)
    for count in (1, PROMPT_TOKENS):
        program.clear_cache()
        part, places = embeddings[:, :count], torch.arange(count + 1)
        actual = program.first_frame(part, places, noise)
        with torch.no_grad():
            expected = FirstFrame(flow_lm, program.settings.prompt_block(count))(part, places, noise)
        for got, wanted in zip(actual, expected):
            assert got.shape == wanted.shape
            torch.testing.assert_close(got, wanted, rtol=1e-3, atol=1e-3)  # the runtime's float rounding


def test_without_a_voice(files):
    audio, report = speak(files, voice=None)
    assert report.frames > 0 and audio.numel() == report.frames * 1920 and torch.isfinite(audio).all()


def test_a_chunk_too_long_for_the_cache_is_split_at_words_not_cut(files, tmp_path):
    """With end of speech never reached, every chunk runs to pocket-tts's maximum of frames: one too
    long for the cache with an 11 s voice (139 positions of 256) is split at words, each part given
    all its frames, every word spoken."""
    wav = stand_in_voice(tmp_path / "long.wav", seconds=11.0)
    program = SpeechProgram(files[0])
    speaker = Speaker(program, 0.0)
    speaker.settings = dataclasses.replace(speaker.settings, eos_threshold=float("inf"))
    speaker.set_voice(AudioVoice.read(wav, 24000, 1920))
    text = " ".join(["word"] * 40)  # one sentence, no comma to split at: pocket-tts keeps it one chunk
    chunks = speaker.chunks(text)
    assert len(chunks) > 1 and all(split for _, _, split in chunks)
    assert " ".join(chunk.rstrip(".") for chunk, _, _ in chunks).lower() == text
    report = SpeechReport(0, 0, 24000, 1920, 0.0)
    speaker.speak(text, lambda pcm: None, report)
    counts = [speaker.tokenizer(chunk).shape[1] for chunk, _, _ in chunks]
    assert report.frames == sum(speaker.settings.max_generated_frames(n) for n in counts)
    assert report.split_chunks == len(chunks) and report.eos_frames == [None] * len(chunks)


def test_a_voice_too_long_for_the_program_is_named(files, tmp_path):
    wav = stand_in_voice(tmp_path / "very-long.wav", seconds=25.0)
    speaker = Speaker(SpeechProgram(files[0]), 0.0)
    with pytest.raises(PhaseconvError, match="the program holds 256"):
        speaker.set_voice(AudioVoice.read(wav, 24000, 1920))


def test_a_recording_over_30_s_is_read_as_pocket_tts_keeps_it(tmp_path):
    wav = stand_in_voice(tmp_path / "minute.wav", seconds=40.0, rate=8000)
    voice = AudioVoice.read(wav, 24000, 1920)
    tts = build_tts(CONFIG)
    with torch.no_grad():
        state = tts.get_state_for_audio_prompt(wav, truncate=True)
    assert voice.truncated == pytest.approx(10.3, abs=0.01)  # the stand-in's 0.3 s of silence too
    assert voice.frames + 1 == int(state["transformer.layers.0.self_attn"]["offset"][0])


def test_bad_tokenizer_and_voice(files, tmp_path):
    path, _, _ = files
    small = stand_in_tokenizer(tmp_path / "small.model", 1000)
    with pytest.raises(PhaseconvError, match="vocab size=1000 but nbins=4000"):
        Speaker(SpeechProgram(path, tokenizer=small))
    noise = tmp_path / "noise.wav"
    noise.write_bytes(b"RIFF not really")
    with pytest.raises(PhaseconvError, match="is not audio"):
        AudioVoice.read(noise, 24000, 1920)
    with pytest.raises(PhaseconvError, match="is not a pocket-tts voice state"):
        read_state(tmp_path / "small.model")
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
    from phaseconv.quantize import snr_db
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.tts.build import Decode, lm_latents

    model = random_model(config)
    programs, _, settings = tts_programs(model, capacity=64, quantize_decoder="int8")
    assert settings.quantize_decoder == "int8" and settings.decode_frames == [1]  # a frame a call: its scales
    assert not {"decode_2", "decode_4"} & set(programs)
    assert any("quantize_per_tensor" in str(node.target) for node in programs["decode"].graph.nodes)
    program = LoadedProgram(lower({name: programs[name] for name in ("decode", "reset_decoder")}).buffer)
    latents = lm_latents(model.tts, frames=50, seed=5)
    decode = Decode(model.tts, MimiStep(model.tts.mimi)).eval()
    expected = torch.cat([decode(latent) for latent in latents], dim=-1)
    utterances = []
    for _ in range(2):
        program.run((), "reset_decoder")
        utterances.append(torch.cat([program.run((latent,), "decode")[0] for latent in latents], dim=-1))
    assert torch.equal(utterances[0], utterances[1])
    assert snr_db(expected, utterances[0]) > measured_snr - 2
