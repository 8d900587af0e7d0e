"""Vocos as the `vocos` package builds it (mel-24khz's architecture, random weights): its iSTFT head
builds the spectrum as mag * (cos + 1j * sin), which stock ExecuTorch cannot lower; after phaseconv
the whole vocoder is one XNNPACK partition, and the runtime's audio is the model's."""

import pytest
import torch

import phaseconv
from phaseconv.models import vocos
from phaseconv.models.loading import load_model
from tests.helpers import assert_close, lower_and_run

try:
    vocos.vocos_modules()
except phaseconv.PhaseconvError:
    pytest.skip("vocos is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def vocoder():
    model, inputs = vocos.mel_vocoder(frames=12)
    with torch.no_grad():
        expected = model(*inputs)
    return torch.export.export(model, inputs), inputs, expected


def test_the_istft_head_becomes_a_transposed_convolution(vocoder):
    ep, _, _ = vocoder
    applied = {d.rule for d in phaseconv.explain(ep) if d.applied}
    assert {"istft", "conv_transpose", "layer_norm"} <= applied, applied


def test_lowers_to_one_partition_and_matches_the_model(vocoder):
    ep, inputs, expected = vocoder
    summary, (audio,) = lower_and_run(phaseconv.rewrite(ep), *inputs)
    assert summary.partitions == 1 and summary.outside == {}, summary
    assert audio.shape == (1, 256 * 11)  # centered: hop * (frames - 1) samples
    assert_close(audio, expected)


def test_the_stock_lowering_fails_on_the_complex_scalar(vocoder):
    ep, inputs, _ = vocoder
    with pytest.raises(Exception, match="complex"):
        lower_and_run(ep, *inputs)


def test_export_onnx_runs_what_the_stock_export_cannot(vocoder):
    pytest.importorskip("onnxruntime")
    from phaseconv.runtimes.onnxruntime import OrtSession

    ep, inputs, expected = vocoder
    (audio,) = OrtSession(phaseconv.export_onnx(ep)[0], 1).run(inputs)
    assert_close(audio, expected)


def test_built_in_name():
    source = load_model("vocos:mel?frames=5")
    assert source.inputs[0].shape == (1, 100, 5)
    with pytest.raises(phaseconv.PhaseconvError, match="vocos:mel takes no argument 'seconds'"):
        load_model("vocos:mel?seconds=1")
