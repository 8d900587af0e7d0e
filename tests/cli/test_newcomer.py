"""A newcomer's first runs of the command: modules prepared by default, failures with their cause,
no library chatter on stderr, output that stays readable in a pipe, built-in names for real models."""

import json
import os

import pytest

from tests.cli.test_cli import ROOT, phaseconv, phaseconv_here

TINY_MIMI = "tests.cli.factories:tiny_mimi"


def test_a_factory_is_prepared_by_default_and_says_so():
    pytest.importorskip("transformers")
    result = phaseconv("explain", TINY_MIMI, "--json")
    assert result.returncode == 0, result.stderr
    decisions = json.loads(result.stdout)
    assert any(d["rule"] == "conv_transpose" and d["applied"] for d in decisions)
    assert result.stderr.strip().splitlines() == [
        f"prepared {TINY_MIMI} with phaseconv.prepare (weight_norm baked, conv settings static); "
        "--no-prepare exports it as built"
    ]


@pytest.mark.slow
def test_without_prepare_the_failure_names_its_cause_and_fix(tmp_path):
    pytest.importorskip("transformers")
    result = phaseconv("lower", TINY_MIMI, "--no-prepare", "-o", tmp_path / "mimi.pte")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("phaseconv: error:") and "phaseconv.prepare" in line and "--no-prepare" in line
    assert not (tmp_path / "mimi.pte").exists()


def test_a_pt2_file_is_taken_as_it_is(pt2):
    result = phaseconv("explain", pt2)
    assert result.returncode == 0 and "prepared" not in result.stderr


def test_normal_runs_print_nothing_on_stderr_but_what_the_user_caused(seanet_lowering):
    result, _ = seanet_lowering
    assert [line for line in result.stderr.splitlines() if not line.startswith("prepared demo:")] == []


@pytest.mark.slow  # a second lowering of the decoder, 36 s here
def test_debug_shows_the_library_warnings(tmp_path):
    debug = phaseconv("--debug", "lower", "demo:seanet-decoder", "-o", tmp_path / "d.pte")
    assert "Warning" in debug.stderr  # the library warnings are still there when asked for


def test_piped_output_is_a_short_summary(seanet_lowering):
    """Piped, `lower` says what each rule did in two lines (not one per node), one line per program."""
    result, pte = seanet_lowering
    assert "│" not in result.stdout and "┃" not in result.stdout
    lines = result.stdout.splitlines()
    assert len(lines) <= 15, lines
    assert any(line.startswith("stock: ") and "partition(s)" in line for line in lines)
    assert any(line.startswith("phaseconv: 1 partition(s)") for line in lines)
    (rewrote,) = [line for line in lines if line.startswith("rewrote ")]
    assert "conv_transpose x4" in rewrote and "elu x" not in rewrote  # XNNPACK runs the ELUs itself
    (left,) = [line for line in lines if line.startswith("left ")]
    assert "elu x" in left and "XNNPACK runs this ELU itself" in left
    inspected = phaseconv("inspect", pte).stdout.splitlines()
    assert len(inspected) == 1 and inspected[0].startswith("d.pte: 1 partition(s)")


@pytest.mark.slow
def test_models_lists_the_built_in_names():
    result = phaseconv("models")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    for name in (
        "demo:mimi-decoder",
        "hf:mimi[?frames=<int>]",
        "hf:encodec[?seconds=<float>]",
        "hf:hifigan-v1[?frames=<int>]",
    ):
        assert name in names
    assert any(name.startswith("pocket-tts:CONFIG") for name in names)
    listed = json.loads(phaseconv("models", "--json").stdout)
    assert {"name", "description"} <= set(listed[0])


@pytest.mark.slow
def test_a_built_in_real_decoder_by_name():
    pytest.importorskip("transformers")
    result = phaseconv("explain", "hf:hifigan?frames=3", "--json")
    assert result.returncode == 0, result.stderr
    assert sum(d["rule"] == "conv_transpose" for d in json.loads(result.stdout)) == 4


@pytest.mark.parametrize(
    "spec, message",
    [
        ("hf:nope", "unknown model hf:nope; built in: hf:mimi"),
        ("hf:mimi?frame=2", "hf:mimi takes no argument 'frame' (it takes: frames)"),
        ("hf:dac?seconds=x", "hf:dac: seconds='x' is not a number"),
    ],
)
def test_bad_built_in_names(spec, message):
    result = phaseconv_here("explain", spec)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_without_transformers_the_message_says_what_to_install(tmp_path):
    (tmp_path / "transformers.py").write_text("raise ImportError('not installed')\n")
    result = phaseconv("explain", "hf:mimi", env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert result.returncode == 2 and "pip install 'transformers" in result.stderr, result.stderr
