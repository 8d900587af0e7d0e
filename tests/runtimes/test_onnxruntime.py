"""phaseconv.export_onnx: the rewritten program through ONNX Runtime, against eager."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.errors import PhaseconvError
from phaseconv.models.audio import seanet_decoder
from phaseconv.models.unet import unet
from tests.helpers import CausalStep, PaddedConv, assert_close, assert_streams_like_eager, export

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from phaseconv.runtimes.onnxruntime import OrtSession  # noqa: E402


def op_types(model: bytes) -> set[str]:
    return {node.op_type for node in onnx.load_from_string(model).graph.node}


@pytest.mark.parametrize(
    "build, rewritten",
    [
        pytest.param(lambda: seanet_decoder(frames=3, latent=16, channels=32), True, id="seanet-1d"),
        pytest.param(
            lambda: (nn.ConvTranspose1d(8, 4, 7, 3, 2, output_padding=1), (torch.randn(2, 8, 9),)), True, id="1d-odd"
        ),
        pytest.param(lambda: unet(size=16, widths=(4, 8, 16)), False, id="unet-2d"),
    ],
)
def test_export_onnx_runs_in_onnx_runtime_like_eager(build, rewritten, tmp_path):
    """1-D transposed convolutions are rewritten; 2-D ones are left to ONNX Runtime (slower rewritten)."""
    module, inputs = build()
    module = phaseconv.prepare(module).eval()
    ep = export(module, *inputs)
    model, decisions = phaseconv.export_onnx(ep, tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx").read_bytes() == model
    assert ("ConvTranspose" not in op_types(model)) == rewritten
    if not rewritten:
        reasons = {d.reason for d in decisions if d.rule == "conv_transpose"}
        assert reasons == {"2-D layers are not rewritten for this target (it runs them faster as they are)"}
    with torch.no_grad():
        expected = module(*inputs)
    (out,) = OrtSession(model).run(inputs)
    assert_close(out, expected, scale=float(expected.abs().max()))


def test_export_onnx_runs_one_frame_of_a_causal_convolution_as_one_matmul_of_its_live_taps():
    """One frame into a causal k7 convolution: 5 of its 7 taps read only the pad (dropped); the 2
    outputs of the other 2 are a MatMul with a 2 x 8 -> 16 weight, not a Conv."""
    module, x = PaddedConv().eval(), torch.randn(1, 8, 2)
    model, decisions = phaseconv.export_onnx(export(module, x))
    assert {d.rule for d in decisions if d.applied} >= {"padded_taps", "short_conv"}, decisions
    assert "Conv" not in op_types(model)
    (weight,) = [t for t in onnx.load_from_string(model).graph.initializer if len(t.dims) == 2]
    assert sorted(weight.dims) == [16, 16]
    with torch.no_grad():
        assert_close(OrtSession(model).run((x,))[0], module(x))


def test_a_stateful_step_exports_its_state_as_inputs_and_outputs():
    """torch.onnx alone drops buffer writes; here each call is fed the state the one before returned
    and matches eager over several calls; a call without state starts from the initial one."""
    x = torch.randn(1, 4, 5)
    ep = export(CausalStep(), x)
    model, _ = phaseconv.export_onnx(ep)
    session = OrtSession(model)
    assert session.state_names == ["state.previous", "state.count"]
    assert_streams_like_eager(session, ep, x)


def test_a_stateful_step_of_dynamic_length_is_refused():
    steps = torch.export.Dim("steps", min=2, max=16)
    ep = export(CausalStep(), torch.randn(1, 4, 5), dynamic_shapes=({2: steps},))
    with pytest.raises(PhaseconvError, match="keeps state and has dynamic sizes"):
        phaseconv.export_onnx(ep)


def test_export_onnx_keeps_a_depthwise_transposed_convolution_one_grouped_conv():
    """Mimi's upsampler (depthwise, k4 s2): one Conv of channel multiplier 2, no per-phase convs and cat."""
    module, x = nn.ConvTranspose1d(8, 8, 4, 2, groups=8, bias=False).eval(), torch.randn(1, 8, 5)
    model, decisions = phaseconv.export_onnx(export(module, x))
    assert any(d.rule == "conv_transpose" and d.applied for d in decisions), decisions
    types = [node.op_type for node in onnx.load_from_string(model).graph.node]
    assert types.count("Conv") == 1 and "ConvTranspose" not in types and "Concat" not in types
    with torch.no_grad():
        assert_close(OrtSession(model).run((x,))[0], module(x))


def test_export_onnx_without_rules_is_the_stock_export():
    module = nn.ConvTranspose1d(4, 4, 4, 2, 1)
    model, decisions = phaseconv.export_onnx(export(module, torch.randn(1, 4, 5)), rules=[])
    assert decisions == [] and "ConvTranspose" in op_types(model)


def test_export_onnx_refuses_what_is_not_a_program():
    with pytest.raises(TypeError, match="export the model first"):
        phaseconv.export_onnx(nn.Conv1d(2, 2, 1))
