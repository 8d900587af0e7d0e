"""The `phaseconv` command through its real entry point, in a subprocess; bad input in this process."""

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACTORY = "tests.cli.factories:small_decoder"
DYNAMIC = "tests.cli.factories:dynamic_decoder"
# The installed console script, beside the interpreter running the tests.
PHASECONV = [str(Path(sys.executable).parent / "phaseconv")]


# A whole text-to-speech program lowers in minutes alone, and twice that beside the other test worker.
WHOLE_PROGRAM_SECONDS = 1800


def phaseconv(*args, cwd=ROOT, env=None, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [*PHASECONV, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


THREADS_SET_HERE = "the command sizes XNNPACK's threads, which a test process may not do twice: use phaseconv()"


def phaseconv_here(*args, cwd=ROOT):
    """The console script's `main` in this process, as `phaseconv` returns it: for bad input, which
    fails before any program loads (a fresh process pays a 4-13 s import of torch and executorch).
    A command that would size XNNPACK's threads fails instead: after a load, that crashes a process."""
    from phaseconv import cli

    argv = ["phaseconv", *map(str, args)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with (
        warnings.catch_warnings(),  # the command silences library warnings and logs: not the suite's
        _logger_levels("torch", "torchao", "executorch", "pocket_tts"),
        mock.patch("phaseconv.runtimes.executorch.set_threads", side_effect=AssertionError(THREADS_SET_HERE)),
        mock.patch.object(sys, "argv", argv),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
        contextlib.chdir(cwd),
    ):
        try:
            cli.main()
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


@contextlib.contextmanager
def _logger_levels(*names):
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@pytest.fixture(scope="module")
def pte(tmp_path_factory):
    path = tmp_path_factory.mktemp("programs") / "decoder.pte"
    result = phaseconv("lower", FACTORY, "-o", path, "--json")
    assert result.returncode == 0, result.stderr
    path.with_suffix(".json").write_text(result.stdout)  # its report, read by the test of the report
    return path


def test_explain_table_and_json(pt2):
    result = phaseconv("explain", pt2)
    assert result.returncode == 0, result.stderr
    assert "conv_transpose" in result.stdout and "yes" in result.stdout
    decisions = json.loads(phaseconv("explain", pt2, "--json").stdout)
    assert [d["rule"] for d in decisions].count("conv_transpose") == 4 and all(d["applied"] for d in decisions)
    assert set(decisions[0]) >= {"node", "rule", "applied", "reason"}


def test_lower_writes_a_program_and_shows_stock_beside_rewritten(pte):
    assert pte.stat().st_size > 0
    report = json.loads(pte.with_suffix(".json").read_text())
    assert report["delegation"]["stock"]["inside"]["XNNConvTranspose2d"] == 4
    assert "XNNConvTranspose2d" not in report["delegation"]["phaseconv"]["inside"]


@pytest.mark.slow  # a third lowering of the decoder; test_lowering and test_stream use both options
def test_lower_no_rewrite_and_external_constants(tmp_path):
    result = phaseconv("lower", FACTORY, "-o", tmp_path / "stock.pte", "--no-rewrite", "--external-constants", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["decisions"] == [] and list(report["delegation"]) == ["stock"]
    assert (tmp_path / "stock.ptd").stat().st_size > (tmp_path / "stock.pte").stat().st_size


def test_lower_for_no_weight_cache_says_when_it_changed_nothing(tmp_path):
    result = phaseconv("lower", "demo:mimi-decoder", "--no-weight-cache", "-o", tmp_path / "d.pte")
    assert result.returncode == 0, result.stderr
    assert "no two linear operators read one weight: --no-weight-cache changed nothing" in result.stdout


def test_inspect_reads_the_file(pte):
    summary = json.loads(phaseconv("inspect", pte, "--json").stdout)
    assert summary["inside"]["XNNConv2d"] > 0 and "XNNConvTranspose2d" not in summary["inside"]
    assert summary["partitions"] == 1 and summary["outside"] == {}, "ELUs rewritten: one partition"
    assert "decoder.pte: 1 partition(s)" in phaseconv("inspect", pte).stdout  # piped: one line per program


@pytest.mark.slow  # lowers a two-layer LSTM stock and rewritten, twice: about 3 minutes here
def test_inspect_says_when_operators_share_a_weight_the_weight_cache_would_pack_once(tmp_path, pte):
    path = tmp_path / "lstm.pte"
    assert phaseconv("lower", "tests.cli.factories:small_lstm", "-o", path).returncode == 0
    summary = json.loads(phaseconv("inspect", path, "--json").stdout)
    # per layer 8 steps, 7 with a recurrent term (h_0 is zero): 6 readers past the first, 4H x H fp32 each
    assert summary["repacked_weights"] == 2 * 6 and summary["repacked_bytes"] == 12 * 512 * 128 * 4
    assert "12 XNNPACK operators read a weight another one reads (3.0 MiB)" in phaseconv("inspect", path).stdout
    assert "weight cache" not in phaseconv("inspect", pte).stdout  # a decoder: every weight read once
    lean = tmp_path / "lean.pte"
    assert phaseconv("lower", "tests.cli.factories:small_lstm", "--no-weight-cache", "-o", lean).returncode == 0
    summary = json.loads(phaseconv("inspect", lean, "--json").stdout)
    # the 14 steps with a recurrent term take it at run time; the input projections stay constants
    assert (summary["run_time_weights"], summary["repacked_weights"], summary["partitions"]) == (14, 0, 1)
    assert "14 XNNPACK operators take their weight at run time" in phaseconv("inspect", lean).stdout


def test_demo_model_by_name():
    result = phaseconv("explain", "demo:mimi-decoder", "--json")
    assert result.returncode == 0
    assert [d["rule"] for d in json.loads(result.stdout)].count("conv_transpose") == 5  # + frame upsampler


@pytest.mark.slow
def test_bench_runs_one_dynamic_program_at_several_lengths(tmp_path):
    result = phaseconv("bench", DYNAMIC, "--lengths", "1,5,12", "--runs", "2", "--json", tmp_path / "r.json")
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert [r["length"] for r in results] == [1, 5, 12]
    assert all(r["programs"][name]["max_abs_error"] < 1e-4 for r in results for name in ("stock", "phaseconv"))
    assert all(r["programs"]["phaseconv"]["delegation"]["partitions"] == 1 for r in results)


@pytest.mark.parametrize(
    "model, lengths, words",
    [(DYNAMIC, "13", "length 13 is outside the program's range 1..12"), (FACTORY, "3", "has static shapes")],
)
def test_bench_lengths_bad_input(model, lengths, words):
    result = phaseconv_here("bench", model, "--lengths", lengths)
    assert result.returncode == 2 and words in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_bench_writes_json_and_plot(tmp_path):
    result = phaseconv(
        "bench", FACTORY, "--threads", "1,2", "--runs", "3", "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png"
    )
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert [r["threads"] for r in results] == [1, 2]
    assert all(r["programs"]["phaseconv"]["runs"] == 3 and r["speedup"] > 0 for r in results)
    assert all(r["programs"]["phaseconv"]["max_abs_error"] < 1e-4 for r in results)
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert "speedup" in result.stdout


def assert_clean_failure(result, *words):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("phaseconv: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def bad_files(tmp_path, pt2, pte):
    text = tmp_path / "notes.pt2"
    text.write_text("hello")
    truncated_pt2 = tmp_path / "truncated.pt2"
    truncated_pt2.write_bytes(pt2.read_bytes()[: pt2.stat().st_size // 2])
    truncated_pte = tmp_path / "truncated.pte"
    truncated_pte.write_bytes(pte.read_bytes()[:200])
    return {"text": text, "truncated_pt2": truncated_pt2, "truncated_pte": truncated_pte}


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("missing", ["no such file"]),
        ("text", ["not an exported program"]),
        ("truncated_pt2", ["not an exported program"]),
        ("factory_raises", ["RuntimeError", "the checkpoint is missing"]),
        ("factory_returns_junk", ["must return (nn.Module, example_inputs)"]),
        ("unexportable", ["torch.export failed"]),
        ("unknown_backend", ["unknown backend 'coreml'"]),
        ("unknown_target", ["unknown target 'arm64'", "any, x86-fma3, x86-avx512, x86-avx512-amd, host"]),
        ("missing_folder", ["does not exist"]),
        ("folder_is_a_file", ["cannot write"]),
    ],
)
def test_lower_bad_input(case, words, tmp_path, bad_files, pt2):
    output = tmp_path / "out" / "model.pte" if case == "missing_folder" else tmp_path / "model.pte"
    args = {
        "missing": [tmp_path / "absent.pt2"],
        "text": [bad_files["text"]],
        "truncated_pt2": [bad_files["truncated_pt2"]],
        "factory_raises": ["tests.cli.factories:broken"],
        "factory_returns_junk": ["tests.cli.factories:not_a_model"],
        "unexportable": ["tests.cli.factories:unexportable"],
        "unknown_backend": [pt2, "--backend", "coreml"],
        "unknown_target": [pt2, "--target", "arm64"],
        "missing_folder": [pt2],
        "folder_is_a_file": [pt2],
    }[case]
    if case == "folder_is_a_file":
        output = bad_files["text"] / "model.pte"
    assert_clean_failure(phaseconv_here("lower", *args, "-o", output), *words)
    assert not output.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "no temporary file left behind"


@pytest.mark.parametrize("case", ["missing", "truncated_pte", "text"])
def test_inspect_bad_input(case, tmp_path, bad_files):
    path = tmp_path / "absent.pte" if case == "missing" else bad_files[case]
    words = ["no such file"] if case == "missing" else ["not an ExecuTorch program"]
    assert_clean_failure(phaseconv_here("inspect", path), *words)


def test_debug_shows_the_traceback(tmp_path):
    result = phaseconv("--debug", "explain", tmp_path / "absent.pt2")
    assert result.returncode != 0 and "Traceback" in result.stderr


@pytest.mark.slow  # the command end to end; export_onnx and ORT sessions are tested in the default run
def test_onnx_writes_a_model_that_onnx_runtime_runs_like_eager(tmp_path):
    pytest.importorskip("onnxruntime")
    result = phaseconv("onnx", FACTORY, "-o", tmp_path / "decoder.onnx", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["max_abs_error"] < 1e-4
    assert [d["rule"] for d in report["decisions"] if d["applied"]].count("conv_transpose") >= 3
    assert (tmp_path / "decoder.onnx").stat().st_size > 0


@pytest.mark.slow  # 19 s: the command end to end; export_onnx's stateful step is tested in the default run
def test_onnx_gives_a_stateful_step_its_state_as_inputs_and_outputs(tmp_path):
    """Checked over 3 calls, each fed the state the one before returned."""
    pytest.importorskip("onnxruntime")
    result = phaseconv("onnx", "tests.cli.factories:causal_step", "-o", tmp_path / "step.onnx", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["state"] == ["state.previous", "state.count"] and report["calls_checked"] == 3
    assert report["max_abs_error"] < 1e-5


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rules", "conv_transpose,warp"], "unknown rule 'warp'"),
        (["-o", "nowhere/decoder.onnx"], "does not exist"),
    ],
)
def test_onnx_bad_input_gets_one_line_and_no_file(args, words, tmp_path):
    output = ["-o", tmp_path / "decoder.onnx"] if "-o" not in args else []
    result = phaseconv_here("onnx", FACTORY, *output, *args, cwd=tmp_path)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("**/*.onnx"))


@pytest.mark.slow  # the command end to end (a 10 s import of TensorFlow); export_litert is tested in the default run
def test_litert_writes_a_stateful_step_that_litert_runs_like_eager(tmp_path):
    """Checked over 3 calls in LiteRT's interpreter, each fed the state the one before returned."""
    pytest.importorskip("litert_torch")
    result = phaseconv("litert", "tests.cli.factories:causal_step", "-o", tmp_path / "step.tflite", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["state"]) == 2 and report["calls_checked"] == 3
    assert report["max_abs_error"] < 1e-5
    assert (tmp_path / "step.tflite").stat().st_size > 0


@pytest.mark.slow  # end to end (a 10 s import of TensorFlow); int8 export_litert is tested in the default run
def test_litert_int8_reports_its_snr_against_eager(tmp_path):
    pytest.importorskip("litert_torch")
    output = tmp_path / "decoder.tflite"
    result = phaseconv("litert", FACTORY, "-o", output, "--quantize", "int8", "--json")
    assert result.returncode == 0, result.stderr
    assert "no --calibration" in result.stderr
    assert json.loads(result.stdout)["snr_db"] > 25 and output.stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rules", "conv_transpose,warp"], "unknown rule 'warp'"),
        (["-o", "nowhere/decoder.tflite"], "does not exist"),
        (["--no-prepare"], "no such file: absent.pt2"),
        (["--quantize", "int4"], "--quantize takes int8 for LiteRT, got 'int4'"),
        (["--calibration", "calibration"], "--calibration goes with --quantize int8"),
        (["--quantize", "int8", "--calibration", "absent"], "not a folder"),
        (["--rules", "conv_transpose", "--target", "x86-avx512"], "give --rules or --target, not both"),
        (["--target", "arm"], "unknown target 'arm'"),
    ],
)
def test_litert_bad_input_gets_one_line_and_no_file(args, words, tmp_path):
    pytest.importorskip("litert_torch")
    output = ["-o", tmp_path / "decoder.tflite"] if "-o" not in args else []
    model = "absent.pt2" if "--no-prepare" in args else FACTORY
    result = phaseconv_here("litert", model, *output, *args, cwd=tmp_path)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("**/*.tflite"))
