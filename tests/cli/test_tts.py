"""`phaseconv lower pocket-tts-tts:CONFIG` and `phaseconv tts` through the installed console script."""

import json
import subprocess
import wave

import pytest

from phaseconv.models.pocket_tts.stand_ins import stand_in_tokenizer, stand_in_voice
from phaseconv.tts import METHODS
from tests.cli.test_cli import FACTORY, PHASECONV, ROOT, phaseconv, phaseconv_here

pytest.importorskip("pocket_tts")

# Lowering the whole program takes about 4 minutes (the `program` fixture): those tests run with -m slow.
WHOLE_PROGRAM = pytest.mark.slow


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return stand_in_tokenizer(tmp_path_factory.mktemp("tokenizer") / "tokenizer.model", 4000)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("tts") / "tts.pte"
    result = phaseconv("lower", "pocket-tts-tts:english_2m_2026-10", "-o", path, "--capacity", 256, "--json")
    assert result.returncode == 0, result.stderr
    methods = json.loads(result.stdout)["methods"]
    generate = {f"generate_{block}" for block in range(4)}  # 256 positions in blocks of 64
    assert set(methods) == set(METHODS) - {"settings"} | generate
    assert all(methods[name]["partitions"] == 1 for name in [*generate, "decode"])
    assert set(methods["decode"]["outside"]) == {"aten::copy_"}
    return path


@WHOLE_PROGRAM
def test_wav_and_summary(program, tokenizer, tmp_path):
    voice = stand_in_voice(tmp_path / "voice.wav")
    args = ["tts", program, "Hello there.", "--tokenizer", tokenizer, "--voice", voice]
    result = phaseconv(*args, "-o", tmp_path / "out.wav", "--json", tmp_path / "s.json", "--seed", 1)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    with wave.open(str(tmp_path / "out.wav")) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 24000)
        assert audio.getnframes() == summary["frames"] * 1920 > 0
    assert summary["threads"] == 1 and summary["chunks"] == 1
    assert summary["precision"] == {"lm": "fp32", "decoder": "fp32"}
    assert {"first_audio_ms", "lm_median_ms", "decode_median_ms", "real_time_factor"} <= set(summary)
    assert "real-time factor" in result.stderr and "1 thread" in result.stderr


@WHOLE_PROGRAM
@pytest.mark.parametrize("pipeline", [[], ["--pipeline"]], ids=["one process", "decoder in a second process"])
def test_pcm_on_stdout_and_a_reader_that_closes_early(program, tokenizer, pipeline):
    args = [*PHASECONV, "tts", str(program), "Hello there.", "--tokenizer", str(tokenizer), "--pcm", *pipeline]
    whole = subprocess.run(args, capture_output=True, cwd=ROOT, timeout=600)
    assert whole.returncode == 0 and len(whole.stdout) % (1920 * 2) == 0 and len(whole.stdout) > 1000
    # more audio than a pipe holds (64 KiB): the writes after the reader is gone fail
    args[3] = " ".join(["Here is one sentence of a text too long for the pipe."] * 6)
    reader = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert len(reader.stdout.read(1000)) == 1000
    reader.stdout.close()
    _, stderr = reader.communicate(timeout=600)
    assert reader.returncode == 1 and b"Traceback" not in stderr and b"error" not in stderr  # quiet


@WHOLE_PROGRAM
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--voice", "{folder}/noise.wav"], "is not audio pocket-tts can read"),
        (["--tokenizer", "{folder}/small.model"], "vocab size=1000 but nbins=4000"),
    ],
    ids=["voice-not-audio", "tokenizer-size"],
)
def test_bad_files_get_one_line_and_no_output(program, tokenizer, tmp_path, extra, message):
    (tmp_path / "noise.wav").write_bytes(b"RIFF not really")
    stand_in_tokenizer(tmp_path / "small.model", 1000)
    extra = [e.format(folder=tmp_path) for e in extra]
    result = phaseconv("tts", program, "Hi.", "--tokenizer", tokenizer, *extra, "-o", tmp_path / "out.wav")
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.wav").exists()


@pytest.fixture(scope="module")
def not_tts(tmp_path_factory):
    path = tmp_path_factory.mktemp("programs") / "decoder.pte"
    assert phaseconv("lower", FACTORY, "-o", path).returncode == 0
    return path


@pytest.mark.parametrize(
    "args, message",
    [
        (["{not_tts}", "  ", "--tokenizer", "{tokenizer}", "--pcm"], "the text is empty"),
        (["{not_tts}", "Hi.", "--tokenizer", "{tokenizer}"], "either --pcm (stdout) or -o out.wav"),
        (["{not_tts}", "Hi.", "--tokenizer", "missing.model", "--pcm"], "no such tokenizer file: missing.model"),
        (["{not_tts}", "Hi.", "--tokenizer", "{tokenizer}", "--voice", "no.wav", "--pcm"], "no such voice file"),
        (["{not_tts}", "Hi.", "--tokenizer", "{tokenizer}", "--pcm"], "is not a text-to-speech program"),
    ],
    ids=["empty-text", "no-output", "no-tokenizer", "no-voice", "not-tts"],
)
def test_bad_input_gets_one_line(not_tts, tokenizer, args, message):
    # the last case loads the program, which sets XNNPACK's threads: only in a process of its own
    run = phaseconv if "is not a text-to-speech" in message else phaseconv_here
    result = run("tts", *[a.format(not_tts=not_tts, tokenizer=tokenizer) for a in args])
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_lower_tts_bad_config_and_options(tmp_path):
    result = phaseconv_here("explain", "pocket-tts-tts:english_2m_2026-10")
    assert result.returncode == 2 and "a program of several methods" in result.stderr
    result = phaseconv_here("lower", "pocket-tts-tts:no_such_config", "-o", tmp_path / "t.pte")
    assert result.returncode == 2 and "unknown pocket-tts config 'no_such_config'" in result.stderr
    result = phaseconv_here("lower", FACTORY, "-o", tmp_path / "t.pte", "--capacity", 64)
    assert result.returncode == 2 and "--capacity and --quantize-decoder are for pocket-tts" in result.stderr
    tts = "pocket-tts-tts:english_2m_2026-10"
    result = phaseconv_here("lower", tts, "-o", tmp_path / "t.pte", "--quantize", "int8")
    assert result.returncode == 2 and "--quantize takes 8da4w or 8da8w for pocket-tts-tts:CONFIG" in result.stderr
    result = phaseconv_here("lower", tts, "-o", tmp_path / "t.pte", "--quantize-decoder", "int4")
    assert result.returncode == 2 and "--quantize-decoder takes int8, got 'int4'" in result.stderr
    result = phaseconv_here("lower", FACTORY, "-o", tmp_path / "t.pte", "--quantize-decoder", "int8")
    assert result.returncode == 2 and "--quantize-decoder are for pocket-tts-tts:CONFIG" in result.stderr
    result = phaseconv_here("lower", tts, "-o", tmp_path / "t.pte", "--no-weight-cache")
    assert result.returncode == 2 and "--no-weight-cache is not for pocket-tts-tts:CONFIG" in result.stderr
    assert not (tmp_path / "t.pte").exists()


def test_summary_names_the_frame_methods_once_when_they_lower_alike():
    from types import SimpleNamespace

    from phaseconv.cli import _numbered_methods

    def summary(partitions):
        return SimpleNamespace(partitions=partitions, layout_transposes=0)

    alike = {"decode": summary(1), "generate_0": summary(1), "generate_1": summary(1), "reset_decoder": summary(0)}
    assert [names for names, _ in _numbered_methods(alike)] == [
        ["decode"],
        ["generate_0", "generate_1"],
        ["reset_decoder"],
    ]
    unlike = {"generate_0": summary(1), "generate_1": summary(2)}
    assert [names for names, _ in _numbered_methods(unlike)] == [["generate_0"], ["generate_1"]]
