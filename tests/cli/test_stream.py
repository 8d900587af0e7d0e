"""`phaseconv lower pocket-tts:CONFIG` and `phaseconv stream` through the installed console script."""

import json
import subprocess
import wave

import numpy as np
import pytest

from tests.cli.test_cli import PHASECONV, ROOT, phaseconv, phaseconv_here

pytest.importorskip("pocket_tts")

SMALL = "pocket-tts:english_2m_2026-10"
# The tests that stream a real step program: lowering it takes about 2 minutes (the `step` fixture),
# so they run with -m slow (in CI) and the default run keeps its 15 minutes.
STEP_PROGRAM = pytest.mark.slow


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    folder = tmp_path_factory.mktemp("step")
    result = phaseconv("lower", SMALL, "-o", folder / "step.pte", "--json", "--random-weights")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["delegation"]["phaseconv"]["partitions"] == 1
    assert set(report["delegation"]["phaseconv"]["outside"]) == {"aten::copy_"}
    return folder / "step.pte"


@STEP_PROGRAM
def test_pcm_on_stdout_is_1920_samples_per_frame(step, tmp_path):
    latents = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    np.save(tmp_path / "z.npy", latents)
    args = ["stream", step, "--latents", tmp_path / "z.npy", "--pcm", "--json", tmp_path / "s.json"]
    result = subprocess.run([*PHASECONV, *map(str, args)], capture_output=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout) == 5 * 1920 * 2
    result.stderr = result.stderr.decode()
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["frames"] == 5 and summary["samples_per_frame"] == 1920 and summary["threads"] == 1
    assert {"first_audio_ms", "median_ms", "p95_ms", "real_time_factor"} <= set(summary)
    assert "first audio" in result.stderr and "p95" in result.stderr and "at 1 thread(s)" in result.stderr


@STEP_PROGRAM
def test_a_step_of_four_frames_a_call_streams_the_audio_of_one_frame_a_call(step, tmp_path):
    """pocket-tts:CONFIG?frames=4: the step over 4 frames a call (as pocket-tts's decoder takes the
    latents queued), the same audio as one frame a call, within float rounding."""
    four = tmp_path / "step4.pte"
    result = phaseconv("lower", f"{SMALL}?frames=4", "-o", four, "--random-weights")
    assert result.returncode == 0, result.stderr
    latents = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    np.save(tmp_path / "z.npy", latents)
    outputs = []
    for program, extra in ((step, []), (four, ["--frames-per-call", 4])):
        args = ["stream", program, "--latents", tmp_path / "z.npy", "--pcm", *extra]
        result = subprocess.run([*PHASECONV, *map(str, args)], capture_output=True, cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        outputs.append(np.frombuffer(result.stdout, dtype="<i2").astype(np.int32))
    assert outputs[0].shape == outputs[1].shape == (8 * 1920,) and np.abs(outputs[0] - outputs[1]).max() <= 1
    result = phaseconv("stream", four, "--frames-per-call", 2, "--pcm")
    assert result.returncode == 2 and "decodes 4 frame(s) a call" in result.stderr


@STEP_PROGRAM
def test_int8_keeps_the_steps_output_block_float_and_says_so(tmp_path):
    result = phaseconv("lower", SMALL, "-o", tmp_path / "int8.pte", "--random-weights", "--quantize", "int8")
    assert result.returncode == 0, result.stderr
    assert "kept fp32: mimi.decoder.model." in result.stderr and "SNR" in result.stdout


@STEP_PROGRAM
def test_wav_output(step, tmp_path):
    result = phaseconv("stream", step, "--frames", 3, "-o", tmp_path / "out.wav")
    assert result.returncode == 0, result.stderr
    with wave.open(str(tmp_path / "out.wav")) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getframerate()) == (1, 2, 24000)
        assert audio.getnframes() == 3 * 1920


@STEP_PROGRAM
@pytest.mark.parametrize(
    "latents, message",
    [
        (np.zeros((3, 7), np.float32), "has shape [3, 7]; the step takes [frames, 32]"),
        (np.zeros((3, 32), np.float64), "float64"),
        (np.zeros((0, 32), np.float32), "has shape [0, 32]"),
    ],
    ids=["width", "dtype", "empty"],
)
def test_bad_latents_get_one_line_and_no_file(step, tmp_path, latents, message):
    np.save(tmp_path / "z.npy", latents)
    result = phaseconv("stream", step, "--latents", tmp_path / "z.npy", "-o", tmp_path / "out.wav")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out.wav").exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "z.npy"]


def test_a_program_that_is_not_a_step_is_refused(seanet_lowering):
    _, pte = seanet_lowering
    result = phaseconv("stream", pte, "--frames", 2, "--pcm")
    assert result.returncode == 2 and "is not a step program" in result.stderr, result.stderr


@pytest.mark.slow
def test_missing_external_data_is_refused_before_loading(tmp_path):
    pte = tmp_path / "d.pte"
    result = phaseconv("lower", "demo:seanet-decoder", "-o", pte, "--no-rewrite", "--external-constants")
    assert result.returncode == 0, result.stderr
    pte.with_suffix(".ptd").unlink()
    result = phaseconv("stream", pte, "--frames", 2, "--pcm")
    assert result.returncode == 2 and "d.ptd is missing" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["lower", "pocket-tts:nope", "-o", "{tmp}/x.pte"], "unknown pocket-tts config 'nope'"),
        (
            ["lower", "demo:seanet-decoder", "--weights", "{tmp}/w.safetensors", "-o", "{tmp}/x.pte"],
            "are for pocket-tts:CONFIG models",
        ),
        (["lower", SMALL, "--weights", "{tmp}/none.safetensors", "-o", "{tmp}/x.pte"], "no such weights file"),
        (["lower", SMALL, "--weights", "{tmp}/w.safetensors", "-o", "{tmp}/x.pte"], "cannot read"),
        (["stream", "{tmp}/w.safetensors", "--pcm"], "not an ExecuTorch program"),
        (["stream", "{tmp}/none.pte", "--pcm"], "no such file"),
    ],
    ids=["config", "weights-elsewhere", "no-weights", "bad-weights", "not-a-program", "no-program"],
)
def test_bad_input_gets_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "w.safetensors").write_bytes(b"not safetensors")
    # `stream` sizes XNNPACK's threads before it reads the program: only in a process of its own
    run = phaseconv if args[0] == "stream" else phaseconv_here
    result = run(*[a.format(tmp=tmp_path) for a in args])
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "x.pte").exists()
