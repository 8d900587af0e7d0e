"""The C++ runner (runner/, built by `./dev runner`) driven as a user drives it: its text handling
against pocket-tts's own on varied texts, its audio against the Python runner's, its stream, and the
bad inputs the Python runner refuses, refused alike."""

import json
import subprocess
import wave

import numpy as np
import pytest

from phaseconv.models.pocket_tts import hub
from phaseconv.tts.stand_ins import stand_in_tokenizer
from tests.cli.test_cli import ROOT, phaseconv
from tests.tts.programs import runner_program
from tests.tts.texts import texts

pytest.importorskip("pocket_tts")

BUILD = ROOT / "runner" / "build"
RUNNER, TEXT_TOOL = BUILD / "phaseconv-tts", BUILD / "phaseconv-tts-text"
API_CHECK, LIBRARY = BUILD / "phaseconv-tts-api-check", ROOT / "runner" / "install" / "lib" / "libphaseconv_tts.so"
OPTIONS = ("pad_with_spaces_for_short_inputs", "remove_semicolons", "append_terminal_punctuation")
OPTIONS += ("capitalize_first_letter", "replace_characters")


@pytest.fixture(scope="module")
def built():
    assert RUNNER.is_file() and TEXT_TOOL.is_file(), "build the C++ runner first: ./dev runner"


@pytest.fixture(scope="module", params=[".model", ".json"], ids=["sentencepiece", "tokenizers"])
def tokenizer(request, tmp_path_factory):
    return stand_in_tokenizer(tmp_path_factory.mktemp("tokenizer") / f"tokenizer{request.param}", 4000)


def pocket_tts_text(tokenizer_path, config, text):
    """pocket-tts's ids, decoding and chunks of `text` with a config's text settings."""
    from pocket_tts.default_parameters import MAX_TOKEN_PER_CHUNK
    from pocket_tts.models.text_chunking import prepare_text_prompt, split_into_best_sentences

    from phaseconv.tts.source import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_path, 4000)
    options = [getattr(config, name) for name in OPTIONS]
    ids = tokenizer.encode(text)
    out = {"ids": ids, "decoded": tokenizer.decode(ids)}
    try:
        chunks = split_into_best_sentences(tokenizer, text, MAX_TOKEN_PER_CHUNK, *options)
        out["chunks"] = [[chunk, *prepare_text_prompt(chunk, *options)] for chunk in chunks]
    except ValueError as error:
        out["error"] = str(error)
    return out


@pytest.mark.parametrize("config", ["english_2m_2026-10", "english_2026-01", "french"])
def test_token_ids_and_chunks_equal_pocket_tts_on_varied_texts(built, tokenizer, config):
    """english_2026-01 pads short inputs with spaces, french replaces semicolons, english_2m replaces
    dashes and curly quotes: each config's text settings, on 320 texts."""
    from pocket_tts.default_parameters import MAX_TOKEN_PER_CHUNK

    settings = hub.load_config(config)
    options = {name: getattr(settings, name) for name in OPTIONS} | {"max_tokens_per_chunk": MAX_TOKEN_PER_CHUNK}
    sample = texts()
    result = subprocess.run(
        [str(TEXT_TOOL), str(tokenizer), json.dumps(options)],
        input="".join(json.dumps(text) + "\n" for text in sample),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(answers) == len(sample) >= 300
    for text, answer in zip(sample, answers):
        expected = pocket_tts_text(tokenizer, settings, text)
        assert answer["ids"] == expected["ids"], text
        assert answer["decoded"] == expected["decoded"], text
        assert answer.get("chunks") == expected.get("chunks"), text
        assert ("error" in answer) == ("error" in expected), text


# The programs the audio tests speak with: lowering takes minutes, so they run with -m slow (in CI).
@pytest.fixture(scope="module", params=["english_2m_2026-10", "english_18m_2026-10"])
def program(request, tmp_path_factory):
    """The config's program with random weights, a stand-in tokenizer and a built-in voice (the state
    of the stand-in voice), at 256 positions; the voice's audio and state files beside it."""
    return runner_program(tmp_path_factory, request.param)


# the tests whose answer does not depend on the config take english_2m's program alone
ONE_CONFIG = pytest.mark.parametrize("program", ["english_2m_2026-10"], indirect=True)


def read_pcm(path):
    with wave.open(str(path)) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 24000)
        return np.frombuffer(audio.readframes(audio.getnframes()), dtype="<i2").astype(np.int32)


def cpp(*args, **kwargs):
    return subprocess.run([str(RUNNER), *map(str, args)], capture_output=True, timeout=600, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("voice", [None, "alba", "voice.safetensors", "voice.wav"])
def test_audio_equals_the_python_runners_at_temperature_0(built, program, voice):
    text = "Two runners, one program. They should say the same thing, frame for frame!"
    args = ["--voice", voice if voice == "alba" else program / voice] if voice else []
    python = phaseconv("tts", program / "tts.pte", text, *args, "--temperature", 0, "-o", program / "python.wav")
    assert python.returncode == 0, python.stderr
    result = cpp(
        program / "tts.pte", text, *args, "--temperature", 0, "-o", program / "cpp.wav", "--json", program / "s.json"
    )
    assert result.returncode == 0, result.stderr
    expected, heard = read_pcm(program / "python.wav"), read_pcm(program / "cpp.wav")
    assert heard.shape == expected.shape and np.abs(heard - expected).max() <= 1
    summary = json.loads((program / "s.json").read_text())
    assert summary["frames"] * 1920 == heard.size and summary["threads"] == 1
    assert summary["decode_calls"] < summary["frames"]  # several frames a call once the audio runs ahead
    assert {"first_audio_ms", "lm_median_ms", "decode_median_ms", "real_time_factor", "voice"} <= set(summary)
    assert len(result.stderr.decode().strip().splitlines()) == 1 and "real-time factor" in result.stderr.decode()


@pytest.mark.slow
def test_the_same_seed_gives_the_same_audio_and_another_seed_other_audio(built, program):
    """The same within float rounding: which frames the decoder takes at once depends on timing."""
    outputs = []
    for seed in (5, 5, 6):
        result = cpp(program / "tts.pte", "Noise, drawn again.", "--seed", seed, "--stream")
        assert result.returncode == 0, result.stderr
        outputs.append(np.frombuffer(result.stdout, dtype="<i2").astype(np.int32))
    assert outputs[0].shape == outputs[1].shape and np.abs(outputs[0] - outputs[1]).max() <= 1
    assert outputs[0].shape != outputs[2].shape or np.abs(outputs[0] - outputs[2]).max() > 1


@pytest.mark.slow
def test_stream_is_pcm_on_stdout_and_a_reader_that_closes_early_ends_it_quietly(built, program):
    whole = cpp(program / "tts.pte", "Hello there.", "--stream")
    assert whole.returncode == 0 and len(whole.stdout) % (1920 * 2) == 0 and len(whole.stdout) > 1000
    text = " ".join(["Here is one sentence of a text too long for the pipe."] * 6)
    reader = subprocess.Popen(
        [str(RUNNER), str(program / "tts.pte"), text, "--stream"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert len(reader.stdout.read(1000)) == 1000
    reader.stdout.close()
    _, stderr = reader.communicate(timeout=600)
    assert reader.returncode == 1 and stderr == b""


@pytest.mark.slow
@ONE_CONFIG
@pytest.mark.parametrize(
    "args",
    [
        ["   "],
        ["Hi.", "--voice", "bob"],
        ["Hi.", "--voice", "{folder}/tokenizer.json"],
        ["Hi.", "--voice", "{folder}/missing.wav"],
        ["Hi.", "--voice", "{folder}/not.safetensors"],
        ["Hi.", "--tokenizer", "{folder}/small.model"],
        ["Hi.", "-o", "{folder}/no/such/folder/x.wav"],
        ["Hi."],
    ],
    ids=[
        "blank",
        "unknown-voice",
        "not-audio",
        "no-voice-file",
        "not-a-state",
        "tokenizer-size",
        "folder",
        "no-output",
    ],
)
def test_bad_input_is_refused_as_the_python_runner_refuses_it(built, program, args):
    (program / "not.safetensors").write_bytes(b"not a state")
    stand_in_tokenizer(program / "small.model", 1000)
    args = [a.format(folder=program) for a in args]
    output = [] if "-o" in args or args == ["Hi."] else ["-o", program / "bad.wav"]
    python = phaseconv("tts", program / "tts.pte", *args, *output)
    result = cpp(program / "tts.pte", *args, *(["--stream"] if args == ["Hi."] else output))
    if args == ["Hi."]:  # nowhere for the audio to go: refused before either loads the program
        result = cpp(program / "tts.pte", *args)
    for said in (python.stderr, result.stderr.decode()):
        assert len(said.strip().splitlines()) == 1 and "error" in said, said
    assert python.returncode == result.returncode == 2, (python.stderr, result.stderr)
    assert not (program / "bad.wav").exists()


@pytest.mark.slow
@ONE_CONFIG
@pytest.mark.parametrize("name", ["offset-past-file", "cache-longer-than-bytes", "overflowing-shape"])
def test_a_voice_file_whose_header_lies_is_refused_in_one_line(built, program, name):
    from tests.tts.test_cpp_readers import HOSTILE_STATES, voice_state

    state = program / f"{name}.safetensors"
    state.write_bytes(voice_state(layers=1, edit=HOSTILE_STATES[name]))
    result = cpp(program / "tts.pte", "Hi.", "--voice", state, "-o", program / "hostile.wav")
    said = result.stderr.decode()
    assert result.returncode == 2 and len(said.strip().splitlines()) == 1 and "voice state" in said, said
    assert not (program / "hostile.wav").exists()


@pytest.mark.slow
@ONE_CONFIG
def test_the_library_keeps_its_promises_to_a_caller_in_cpp(built, program):
    """stop() from another thread ends generate() within a frame; a failure on the decoder's thread is
    an error and the next generate() speaks; bad input is an error and a message (tests/api_check.cpp)."""
    result = subprocess.run([str(API_CHECK), str(program / "tts.pte")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == ["stop", "decoder-failure", "errors"]


@pytest.mark.slow
@ONE_CONFIG
def test_the_c_api_from_ctypes_speaks_as_phaseconv_tts_and_stops_and_refuses(built, program):
    import sys

    text = "A caller in another language. It hears the same."
    expected = cpp(program / "tts.pte", text, "--temperature", 0, "--stream")
    assert expected.returncode == 0, expected.stderr
    out = program / "c_api.json"
    command = [sys.executable, "-m", "tests.tts.c_api", str(LIBRARY), str(program / "tts.pte"), text, str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    seen = json.loads(out.read_text())
    assert (seen["load"], seen["sample_rate"], seen["defaults"]) == (0, 24000, [-1.0, True, -1])
    heard, said = np.array(seen["pcm16"]), np.frombuffer(expected.stdout, dtype="<i2").astype(np.int32)
    assert seen["speak"] == 0 and heard.shape == said.shape and np.abs(heard - said).max() <= 1
    assert seen["stats"]["frames"] * 1920 == heard.size
    assert (seen["stop"], seen["stopped"]) == (0, True) and seen["frames_after_stop"] <= 1
    assert seen["bad_voice"] == 2 and "no voice 'no-such-voice'" in seen["bad_voice_error"]
    assert seen["no_callback"] == 2
    assert seen["missing"] == 1 and "/no/such/program.pte" in seen["missing_error"]


@pytest.mark.slow
@ONE_CONFIG
def test_an_app_built_against_the_installed_package_speaks_as_phaseconv_tts(built, program):
    """runner/examples/speak, a C app that knows only find_package(phaseconv_tts), built by `./dev example`."""
    build = subprocess.run([str(ROOT / "dev"), "example"], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stdout + build.stderr
    text = "An app of its own, linked to the library."
    app = subprocess.run(
        [str(ROOT / "runner" / "build-example" / "speak"), str(program / "tts.pte"), text, str(program / "app.wav")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert app.returncode == 0, app.stderr
    result = cpp(program / "tts.pte", text, "--temperature", 0, "-o", program / "cpp.wav")
    assert result.returncode == 0, result.stderr
    expected, heard = read_pcm(program / "cpp.wav"), read_pcm(program / "app.wav")
    assert heard.shape == expected.shape and np.abs(heard - expected).max() <= 1


def test_the_runner_follows_the_contract_module():
    """runner/src/contract.h is what phaseconv.tts.contract renders: a change to the program's
    methods or settings reaches the C++ runner, or this fails."""
    from phaseconv.tts.contract import render_header

    assert (ROOT / "runner" / "src" / "contract.h").read_text() == render_header()
