"""`phaseconv lower pocket-tts-tts:CONFIG` and `phaseconv tts` as a user runs them: the config's
weights, tokenizer and built-in voice from a Hugging Face cache (offline), two commands, and the
audio of pocket-tts's own load_model and generate_audio on the same cache."""

import json
import subprocess
import wave

import numpy as np
import pytest
import torch

from benchmarks.workers import resident_kib
from phaseconv.tts.contract import METHODS, decode_method, first_frame_method, generate_method, prompt_method
from phaseconv.tts.stand_ins import environment, offline_cache, stand_in_cache, stand_in_tokenizer, stand_in_voice
from tests.cli.test_cli import FACTORY, PHASECONV, ROOT, phaseconv, phaseconv_here
from tests.shared import SPOKEN

pytest.importorskip("pocket_tts")

CONFIG = SPOKEN
TTS = f"pocket-tts-tts:{CONFIG}"
# Lowering the whole program takes minutes (the `program` fixture): those tests run with -m slow.
WHOLE_PROGRAM = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(stand_in_hub):
    return stand_in_hub


@pytest.fixture(scope="module")
def program(lowered_from_hub):
    """`phaseconv lower pocket-tts-tts:CONFIG -o tts.pte`, no other flag: (its --json, the file)."""
    return lowered_from_hub


def speak(program, cache, tmp_path, text, *args):
    out = tmp_path / "out.wav"
    result = phaseconv("tts", program[1], text, *args, "--temperature", 0, "-o", out, env=environment(cache[0]))
    assert result.returncode == 0, result.stderr
    with wave.open(str(out)) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 24000)
        return np.frombuffer(audio.readframes(audio.getnframes()), dtype="<i2").astype(np.int32), result


def pocket_tts_pcm(cache, text, voice, truncate=False):
    """pocket-tts's TTSModel.load_model and generate_audio, on the same cache, as 16-bit PCM."""
    from pocket_tts.models.tts_model import TTSModel

    from phaseconv.stream import to_pcm16

    with offline_cache(cache[0]), torch.no_grad():
        tts = TTSModel.load_model(language=CONFIG, temp=0.0)
        audio = tts.generate_audio(tts.get_state_for_audio_prompt(voice, truncate=truncate), text)
    return np.frombuffer(to_pcm16(audio), dtype="<i2").astype(np.int32)


@WHOLE_PROGRAM
def test_lower_takes_the_configs_weights_tokenizer_and_voices(program, cache):
    summary, _ = program
    settings = summary["settings"]
    assert settings["weights"] == "the config's, with voice cloning" and settings["voice_cloning"]
    assert settings["tokenizer"] == "sentencepiece" and settings["config"] == CONFIG
    assert list(settings["voices"]) == ["alba"] and settings["default_voice"] == "alba"
    # a 30 s voice, 50 tokens and all the frames pocket-tts allows them, in blocks of 64
    assert settings["capacity"] == 704 and settings["generate_blocks"] == list(range(11))
    assert settings["prompt_blocks"] == [2, 10]
    constants = {"settings", "tokenizer"}  # and voice_alba: methods that return a constant, summarized apart
    fixed = {m.name for m in METHODS if not m.name.endswith(("_B", "_N", "_NAME"))} - constants
    sized = {generate_method(b) for b in settings["generate_blocks"]}
    sized |= {method(b) for b in settings["prompt_blocks"] for method in (prompt_method, first_frame_method)}
    sized |= {decode_method(frames) for frames in settings["decode_frames"]}
    methods = summary["methods"]
    assert set(methods) == fixed | sized
    assert all(methods[generate_method(b)]["partitions"] == 1 for b in settings["generate_blocks"])
    prompts = [method(b) for b in settings["prompt_blocks"] for method in (prompt_method, first_frame_method)]
    assert all(methods[name]["partitions"] == 1 for name in prompts)
    assert methods["decode"]["partitions"] == 1 and set(methods["decode"]["outside"]) == {"aten::copy_"}
    # where the time and memory went: each method's stages (in its worker), the program's
    stages = {(s["method"], s["stage"]) for s in summary["stages"]}
    assert {(m, stage) for m in methods for stage in ("rewrite", "to_edge", "to_backend")} <= stages
    assert {(None, "export"), (None, "assemble"), (None, "serialize")} <= stages
    assert summary["memory"]["workers"] >= 1 and summary["memory"]["expected_peak_mib"] > 0


@WHOLE_PROGRAM
@pytest.mark.parametrize("voice", ["alba", "state", "audio", None], ids=["built-in", "safetensors", "audio", "default"])
def test_speaks_as_pocket_tts_does_with_the_same_cache(program, cache, tmp_path, voice):
    """A built-in voice, pocket-tts's own .safetensors state of it, the audio it was made from, and no
    voice (the default: alba): the audio pocket-tts gives, within a step of 16-bit PCM."""
    text = "Hello from the cache, in two commands."
    given = {"alba": "alba", "state": cache[1]["alba"], "audio": cache[1]["wav"], None: None}[voice]
    pcm, result = speak(program, cache, tmp_path, text, *(["--voice", given] if given else []))
    expected = pocket_tts_pcm(cache, text, {"audio": cache[1]["wav"], "state": cache[1]["alba"]}.get(voice, "alba"))
    assert pcm.shape == expected.shape and np.abs(pcm - expected).max() <= 1
    assert "real-time factor" in result.stderr


@WHOLE_PROGRAM
def test_a_recording_longer_than_30_s_is_spoken_in_its_first_30_s_as_pocket_tts_keeps_it(program, cache, tmp_path):
    wav = stand_in_voice(tmp_path / "long.wav", seconds=40.0)
    pcm, result = speak(program, cache, tmp_path, "A long voice.", "--voice", wav)
    expected = pocket_tts_pcm(cache, "A long voice.", wav, truncate=True)
    assert pcm.shape == expected.shape and np.abs(pcm - expected).max() <= 1
    assert "its first 30 s" in result.stderr


@WHOLE_PROGRAM
def test_voices_listed_and_exported_as_pocket_tts_export_voice_writes_them(program, cache, tmp_path):
    result = phaseconv("tts", program[1], "--list-voices")
    assert result.returncode == 0 and result.stdout.startswith("alba: ") and "(default)" in result.stdout
    exported = tmp_path / "me.safetensors"
    result = phaseconv("tts", program[1], "--voice", cache[1]["wav"], "--export-voice", exported)
    assert result.returncode == 0 and exported.is_file(), result.stderr
    from phaseconv.tts.voices import read_state

    torch.testing.assert_close(read_state(exported), read_state(cache[1]["alba"]), rtol=1e-3, atol=1e-3)
    from_state, _ = speak(program, cache, tmp_path, "Same voice.", "--voice", exported)
    from_audio, _ = speak(program, cache, tmp_path, "Same voice.", "--voice", cache[1]["wav"])
    assert np.array_equal(from_state, from_audio)


@WHOLE_PROGRAM
@pytest.mark.parametrize("text", ["?!...", "Ça coûte 5 € — «日本語»."], ids=["punctuation-only", "uncovered"])
def test_text_pocket_tts_would_speak_is_spoken_as_it_speaks_it(program, cache, tmp_path, text):
    pcm, result = speak(program, cache, tmp_path, text, "--voice", "alba")
    expected = pocket_tts_pcm(cache, text, "alba")
    assert pcm.shape == expected.shape and np.abs(pcm - expected).max() <= 1
    if text.startswith("Ça"):
        assert "as its unknown piece" in result.stderr and "日" in result.stderr


@WHOLE_PROGRAM
@pytest.mark.parametrize(
    "extra, message",
    [
        (["Hi.", "--voice", "bob"], "no voice 'bob': the program's built-in voices are alba"),
        (["Hi.", "--voice", "{folder}/noise.wav"], "is not audio pocket-tts can read"),
        (["Hi.", "--voice", "{folder}/noise.safetensors"], "is not a pocket-tts voice state"),
        (["Hi.", "--voice", "{folder}/missing.wav"], "no such voice file"),
        (["Hi.", "--tokenizer", "{folder}/small.model"], "vocab size=1000 but nbins=4000"),
        (["  \n "], "the text is empty"),
        (["Hi.", "--export-voice", "{folder}/no/such/folder/v.safetensors"], "does not exist"),
    ],
    ids=["unknown-voice", "voice-not-audio", "state-not-a-state", "no-voice-file", "tokenizer-size", "blank", "folder"],
)
def test_bad_input_gets_one_line_and_no_output(program, cache, tmp_path, extra, message):
    (tmp_path / "noise.wav").write_bytes(b"RIFF not really")
    (tmp_path / "noise.safetensors").write_bytes(b"not a state")
    stand_in_tokenizer(tmp_path / "small.model", 1000)
    extra = [e.format(folder=tmp_path) for e in extra]
    result = phaseconv("tts", program[1], *extra, "-o", tmp_path / "out.wav", env=environment(cache[0]))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.wav").exists()


@WHOLE_PROGRAM
@pytest.mark.parametrize("pipeline", [[], ["--pipeline"]], ids=["one process", "decoder in a second process"])
def test_pcm_on_stdout_and_a_reader_that_closes_early(program, pipeline):
    args = [*PHASECONV, "tts", str(program[1]), "Hello there.", "--pcm", *pipeline]
    whole = subprocess.run(args, capture_output=True, cwd=ROOT, timeout=600)
    assert whole.returncode == 0 and len(whole.stdout) % (1920 * 2) == 0 and len(whole.stdout) > 1000
    # more audio than a pipe holds (64 KiB): the writes after the reader is gone fail
    args[3] = " ".join(["Here is one sentence of a text too long for the pipe."] * 6)
    reader = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert len(reader.stdout.read(1000)) == 1000
    reader.stdout.close()
    _, stderr = reader.communicate(timeout=600)
    assert reader.returncode == 1 and b"Traceback" not in stderr and b"error" not in stderr  # quiet


@pytest.mark.parametrize("model", [TTS, f"pocket-tts:{CONFIG}"], ids=["whole model", "decoder step"])
def test_weights_out_of_reach_get_one_line_naming_the_file_and_both_flags(tmp_path, model):
    result = phaseconv("lower", model, "-o", tmp_path / "t.pte", env=environment(tmp_path / "empty"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "kyutai/pocket-tts-without-voice-cloning/languages/english_2m_2026-10/model.safetensors" in result.stderr
    assert "HF_HUB_OFFLINE is set" in result.stderr and "--weights FILE or --random-weights" in result.stderr
    assert not (tmp_path / "t.pte").exists()


def test_weights_without_voice_cloning_are_the_fallback_and_refuse_an_audio_voice(tmp_path):
    """The gated voice-cloning weights out of reach, pocket-tts falls back to the public ones; a program
    of those refuses an audio voice with pocket-tts's own message."""
    from types import SimpleNamespace

    from phaseconv.errors import PhaseconvError
    from phaseconv.models.pocket_tts import hub
    from phaseconv.tts import TTSModel

    stand_in_cache(tmp_path, CONFIG, cloning=False, voices=())
    with offline_cache(tmp_path):
        found = hub.weights(hub.load_config(CONFIG), CONFIG)
    assert not found.voice_cloning and found.source == "the config's, without voice cloning"
    settings = SimpleNamespace(voices={}, voice_cloning=False, sample_rate=24000, frame_size=1920)
    model = object.__new__(TTSModel)  # the check needs the program's settings alone
    model.program = SimpleNamespace(settings=settings)
    with pytest.raises(PhaseconvError, match="accept the terms"):
        model.get_state_for_audio_prompt(tmp_path / "voice.wav")


@pytest.fixture(scope="module")
def not_tts(tmp_path_factory):
    path = tmp_path_factory.mktemp("programs") / "decoder.pte"
    assert phaseconv("lower", FACTORY, "-o", path).returncode == 0
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (["{not_tts}", "  ", "--pcm"], "the text is empty"),
        (["{not_tts}", "Hi."], "either --pcm (stdout) or -o out.wav"),
        (["{not_tts}"], "say what to speak"),
        (["{not_tts}", "Hi.", "--tokenizer", "missing.model", "--pcm"], "no such tokenizer file: missing.model"),
        (["{not_tts}", "Hi.", "--pcm", "-o", "/no/such/folder/x.wav"], "either --pcm (stdout) or -o out.wav"),
        (["{not_tts}", "Hi.", "-o", "/no/such/folder/x.wav"], "the folder /no/such/folder does not exist"),
        (["{not_tts}", "Hi.", "--pcm"], "is not a text-to-speech program"),
    ],
    ids=["empty-text", "no-output", "no-text", "no-tokenizer", "two-outputs", "no-folder", "not-tts"],
)
def test_bad_input_gets_one_line(not_tts, args, message):
    # the last case loads the program, which sets XNNPACK's threads: only in a process of its own
    run = phaseconv if "is not a text-to-speech" in message else phaseconv_here
    result = run("tts", *[a.format(not_tts=not_tts) for a in args])
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_lower_tts_bad_config_and_options(tmp_path):
    result = phaseconv_here("explain", TTS)
    assert result.returncode == 2 and "a program of several methods" in result.stderr
    result = phaseconv_here("lower", "pocket-tts-tts:no_such_config", "-o", tmp_path / "t.pte")
    assert result.returncode == 2 and "unknown pocket-tts config 'no_such_config'" in result.stderr
    result = phaseconv_here("lower", FACTORY, "-o", tmp_path / "t.pte", "--capacity", 64)
    assert result.returncode == 2 and "--quantize-decoder, --workers and --profile-memory are for" in result.stderr
    result = phaseconv_here("lower", TTS, "-o", tmp_path / "t.pte", "--quantize", "int8")
    assert result.returncode == 2 and "--quantize takes 8da4w or 8da8w for pocket-tts-tts:CONFIG" in result.stderr
    result = phaseconv_here("lower", TTS, "-o", tmp_path / "t.pte", "--quantize-decoder", "int4")
    assert result.returncode == 2 and "--quantize-decoder takes int8, got 'int4'" in result.stderr
    result = phaseconv_here("lower", FACTORY, "-o", tmp_path / "t.pte", "--quantize-decoder", "int8")
    assert result.returncode == 2 and "--workers and --profile-memory are for pocket-tts-tts:CONFIG" in result.stderr
    result = phaseconv_here("lower", TTS, "-o", tmp_path / "t.pte", "--no-weight-cache")
    assert result.returncode == 2 and "--no-weight-cache is not for pocket-tts-tts:CONFIG" in result.stderr
    result = phaseconv_here("lower", TTS, "-o", tmp_path / "t.pte", "--random-weights", "--weights", "m.safetensors")
    assert result.returncode == 2 and "not both" in result.stderr
    result = phaseconv_here("lower", TTS, "-o", tmp_path / "t.pte", "--random-weights", "--voices", "alba")
    assert result.returncode == 2 and "built-in voices are states of the config's released weights" in result.stderr
    assert not (tmp_path / "t.pte").exists()


def test_lower_tts_says_the_memory_it_takes_and_refuses_where_the_machine_has_too_little(cache, tmp_path):
    """Before the heavy part: one line, exit 2, naming --workers 1 where that fits; nothing written."""
    from unittest import mock

    from phaseconv.tts.footprint import Footprint
    from phaseconv.tts.source import build_tts

    footprint = Footprint.of(build_tts(CONFIG, seed=0))
    out = tmp_path / "t.pte"
    between = (footprint.peak_mib(1) + footprint.peak_mib(2)) / 2
    with offline_cache(cache[0]), mock.patch("phaseconv.tts.footprint.available_mib", return_value=between):
        result = phaseconv_here("lower", TTS, "-o", out, "--random-weights", "--workers", 2)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "lowering with 2 workers takes about" in result.stderr and "lower with --workers 1" in result.stderr
    half = footprint.peak_mib(1) / 2
    with offline_cache(cache[0]), mock.patch("phaseconv.tts.footprint.available_mib", return_value=half):
        result = phaseconv_here("lower", TTS, "-o", out, "--random-weights", "--workers", 2)
    assert result.returncode == 2 and "even with --workers 1" in result.stderr
    assert not out.exists()


def test_summary_names_the_frame_methods_once_when_they_lower_alike():
    from types import SimpleNamespace

    from phaseconv.cli.output import numbered_methods

    def summary(partitions):
        return SimpleNamespace(partitions=partitions, layout_transposes=0)

    alike = {"decode": summary(1), "generate_0": summary(1), "generate_1": summary(1), "reset_decoder": summary(0)}
    assert [names for names, _ in numbered_methods(alike)] == [
        ["decode"],
        ["generate_0", "generate_1"],
        ["reset_decoder"],
    ]
    unlike = {"generate_0": summary(1), "generate_1": summary(2)}
    assert [names for names, _ in numbered_methods(unlike)] == [["generate_0"], ["generate_1"]]


def article(words: int = 2000, seed: int = 0) -> str:
    """`words` words in sentences of 5 to 40 words, and every tenth sentence a run-on of 120 with no
    punctuation (a chunk that has to be split at words to fit the cache)."""
    import random

    vocabulary = ["the", "a", "small", "model", "speaks", "every", "word", "of", "this", "long", "text"]
    vocabulary += ["on", "a", "phone", "while", "you", "listen", "today"]
    rng, sentences, count = random.Random(seed), [], 0
    while count < words:
        length = min(120 if len(sentences) % 10 == 9 else rng.randint(5, 40), words - count)
        sentences.append(" ".join(rng.choice(vocabulary) for _ in range(length)).capitalize() + ".")
        count += length
    return " ".join(sentences)


@WHOLE_PROGRAM
def test_a_2000_word_article_in_a_30_s_voice_is_spoken_whole_at_flat_memory(program, cache, tmp_path):
    """Every chunk fits the cache with the voice (a chunk that would not is split at words, never cut),
    and the runner's memory at the end is what it was after the first sentences."""
    text, voice = article(), stand_in_voice(tmp_path / "voice30.wav", seconds=30.0)
    assert len(text.split()) == 2000
    summary = tmp_path / "summary.json"
    command = [*PHASECONV, "tts", str(program[1]), text, "--voice", str(voice), "--pcm", "--json", str(summary)]
    said = tmp_path / "stderr"  # a file, not a pipe: a pipe nobody reads until the end could fill and stall the run
    with said.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT)
    second = 24000 * 2
    received, early, late = 0, None, None
    while data := process.stdout.read(second):
        received += len(data)
        if early is None and received >= 5 * second:  # the first sentences spoken
            early = resident_kib(process.pid)
        late = resident_kib(process.pid) or late
    process.wait(timeout=60)
    assert process.returncode == 0, said.read_text()[-2000:]
    report = json.loads(summary.read_text())
    assert report["split_chunks"] > 0 and report["chunks"] == len(report["eos_frames"])
    assert report["frames"] * 1920 * 2 == received
    assert early and late and late <= early * 1.05, (early, late)


# pocket-tts's README example, as a user copies it; only the import and load lines differ.
POCKET_TTS_USAGE = """
{import_and_load}
import scipy.io.wavfile

voice_state = tts_model.get_state_for_audio_prompt(
    "alba"  # One of the pre-made voices, see above
)
audio = tts_model.generate_audio(voice_state, "Hello world, this is a test.")
# Audio is a 1D torch tensor containing PCM data.
scipy.io.wavfile.write(OUTPUT, tts_model.sample_rate, audio.numpy())
"""
POCKET_TTS = f"from pocket_tts import TTSModel\ntts_model = TTSModel.load_model(language={CONFIG!r}, temp=0.0)"
PHASECONV_TTS = "from phaseconv.tts import TTSModel\ntts_model = TTSModel.load_model(PROGRAM, temp=0.0)"


def run_usage(import_and_load: str, cache, program, output) -> np.ndarray:
    import scipy.io.wavfile

    from phaseconv.stream import to_pcm16

    with offline_cache(cache[0]), torch.no_grad():
        exec(POCKET_TTS_USAGE.format(import_and_load=import_and_load), {"PROGRAM": program, "OUTPUT": output})
    rate, audio = scipy.io.wavfile.read(output)
    assert rate == 24000 and audio.ndim == 1
    return np.frombuffer(to_pcm16(torch.from_numpy(audio)), dtype="<i2").astype(np.int32)


@WHOLE_PROGRAM
def test_pocket_tts_python_usage_runs_on_the_program_with_its_import_and_load_changed(program, cache, tmp_path):
    expected = run_usage(POCKET_TTS, cache, program[1], tmp_path / "pocket.wav")
    heard = run_usage(PHASECONV_TTS, cache, program[1], tmp_path / "phaseconv.wav")
    assert heard.shape == expected.shape and np.abs(heard - expected).max() <= 1


@WHOLE_PROGRAM
def test_tts_model_streams_the_same_audio_stops_within_a_frame_and_keeps_voices_as_values(program, cache, tmp_path):
    import threading

    from pocket_tts.utils.utils import get_predefined_voice

    from phaseconv.tts import TTSModel, export_model_state

    text = "Hello world, this is a test. It has two sentences!"
    with offline_cache(cache[0]):
        model = TTSModel.load_model(program[1], temp=0.0)
        alba = model.get_state_for_audio_prompt("alba")
        from_url = model.get_state_for_audio_prompt(get_predefined_voice(language=CONFIG, name="alba"))
    cloned = model.get_state_for_audio_prompt(cache[1]["wav"])
    whole = model.generate_audio(alba, text)
    assert whole.dim() == 1 and whole.numel() % 1920 == 0
    assert torch.equal(torch.cat(list(model.generate_audio_stream(alba, text))), whole)
    model.generate_audio(cloned, "Another voice between.")
    assert torch.equal(model.generate_audio(alba, text), whole)  # nothing of one call reaches the next
    assert torch.equal(model.generate_audio(from_url, text), whole)
    export_model_state(cloned, tmp_path / "cloned.safetensors")
    again = model.get_state_for_audio_prompt(tmp_path / "cloned.safetensors")
    assert torch.equal(again.cache, cloned.cache)
    stop, after_stop = threading.Event(), 0
    for number, _ in enumerate(model.generate_audio_stream(alba, text * 3, stop=stop)):
        after_stop += stop.is_set()
        if number == 2:
            stop.set()
    assert number >= 2 and after_stop <= 1
    shorter = model.generate_audio(alba, text, frames_after_eos=0, max_tokens=10)
    assert shorter.numel() > 0
