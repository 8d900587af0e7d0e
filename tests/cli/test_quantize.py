"""`phaseconv lower --quantize`: int8 programs from the command line, and its bad input."""

import json

import numpy as np
import pytest

from tests.cli.factories import small_decoder
from tests.cli.test_cli import FACTORY, assert_clean_failure, phaseconv, phaseconv_here


@pytest.fixture
def calibration(tmp_path):
    """Three input sets for the small decoder, one .npy file each."""
    _, (x,) = small_decoder()
    folder = tmp_path / "calibration"
    folder.mkdir()
    generator = np.random.default_rng(0)
    for index in range(3):
        np.save(folder / f"{index}.npy", generator.standard_normal(tuple(x.shape)).astype(np.float32))
    return folder


@pytest.mark.slow
def test_lower_int8_calibrated_from_a_folder(calibration, tmp_path):
    output = tmp_path / "int8.pte"
    result = phaseconv("lower", FACTORY, "--quantize", "int8", "--calibration", calibration, "-o", output, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["delegation"]["phaseconv"]["partitions"] == 1
    rewritten = [d for d in report["decisions"] if d["rule"] == "conv_transpose" and d["applied"]]
    assert rewritten and all("int8 weight re-arranged" in d["detail"] for d in rewritten), report["decisions"]
    assert 20 < report["snr_db"] < 80, "int8, close to the fp32 output"
    assert "warning" not in result.stderr


@pytest.mark.slow
def test_lower_int8_keeps_the_named_module_float(calibration, tmp_path):
    args = ("lower", FACTORY, "--quantize", "int8", "--calibration", calibration, "--json", "-o")
    every = phaseconv_here(*args, tmp_path / "int8.pte")
    kept = phaseconv_here(*args, tmp_path / "kept.pte", "--keep-float", "layers.12", "--keep-float", "layers.14")
    assert every.returncode == kept.returncode == 0, kept.stderr
    every, kept = json.loads(every.stdout), json.loads(kept.stdout)
    assert kept["delegation"]["phaseconv"]["partitions"] == 1
    assert kept["snr_db"] > every["snr_db"]


@pytest.mark.slow
def test_lower_int8_without_calibration_warns(tmp_path):
    result = phaseconv("lower", FACTORY, "--quantize", "int8", "-o", tmp_path / "int8.pte")
    assert result.returncode == 0, result.stderr
    assert "no --calibration" in result.stderr
    assert "SNR" in result.stdout


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("empty", ["no .npy or .npz files"]),
        ("wrong_shape", ["calibration set 1, input 1: [1, 16, 3]"]),
        ("not_a_folder", ["not a folder"]),
        ("without_quantize", ["--calibration goes with --quantize int8"]),
        ("unknown_mode", ["--quantize takes int8 or int8-dynamic"]),
        ("keep_float_without_quantize", ["--keep-float goes with --quantize"]),
        ("keep_float_unknown", ["no operator of the program comes from a module 'layers.12.blok'", "layers.12.block"]),
    ],
)
def test_lower_quantize_bad_input(case, words, calibration, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    if case == "wrong_shape":
        np.save(folder / "0.npy", np.zeros((1, 16, 3), dtype=np.float32))
    args = {
        "empty": ["--quantize", "int8", "--calibration", folder],
        "wrong_shape": ["--quantize", "int8", "--calibration", folder],
        "not_a_folder": ["--quantize", "int8", "--calibration", calibration / "0.npy"],
        "without_quantize": ["--calibration", calibration],
        "unknown_mode": ["--quantize", "int4"],
        "keep_float_without_quantize": ["--keep-float", "layers.12"],
        "keep_float_unknown": ["--quantize", "int8", "--keep-float", "layers.12.blok"],
    }[case]
    output = tmp_path / "model.pte"
    assert_clean_failure(phaseconv_here("lower", FACTORY, *args, "-o", output), *words)
    assert not output.exists()
