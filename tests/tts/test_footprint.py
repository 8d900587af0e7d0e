"""The memory a lowering says it will take, against what benchmarks/lowering.py measured it taking."""

import json
from pathlib import Path

import pytest

from phaseconv.errors import PhaseconvError
from phaseconv.tts.footprint import Footprint, memory_check

RESULTS = Path(__file__).resolve().parents[2] / "results" / "xeon" / "lowering.json"


def measured_rows():
    return [row for row in json.loads(RESULTS.read_text())["rows"] if "memory" in row]


def test_the_estimate_bounds_every_measured_peak_closely():
    """An upper bound on the command's peak (all its processes), within half again of it, for every
    config and worker count measured."""
    rows = measured_rows()
    assert len({row["config"] for row in rows}) >= 3
    for row in rows:
        memory = row["memory"]
        footprint = Footprint(memory["weights_mib"], memory["language_model_mib"])
        expected = footprint.peak_mib(memory["workers"])
        assert row["processes_mib"] <= expected <= 1.5 * row["processes_mib"], row["config"]


def test_the_check_names_the_flag_that_takes_less(monkeypatch):
    footprint = Footprint(weights_mib=400, language_model_mib=300)
    monkeypatch.setattr("phaseconv.tts.footprint.available_mib", lambda: footprint.peak_mib(2) + 1)
    assert "lowering with 2 workers takes about" in memory_check("english", footprint, 2)
    monkeypatch.setattr("phaseconv.tts.footprint.available_mib", lambda: footprint.peak_mib(1) + 1)
    with pytest.raises(PhaseconvError, match="lower with --workers 1"):
        memory_check("english", footprint, 2)
    monkeypatch.setattr("phaseconv.tts.footprint.available_mib", lambda: None)
    assert "takes about" in memory_check("english", footprint, 2)
