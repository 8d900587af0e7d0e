"""phaseconv.export_litert: the rewritten program through LiteRT's interpreter, against eager."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.errors import PhaseconvError
from phaseconv.models.audio import seanet_decoder
from tests.helpers import CausalStep, assert_close, assert_streams_like_eager, export

pytest.importorskip("litert_torch")
pytest.importorskip("ai_edge_litert")

from phaseconv.quantize import snr_db  # noqa: E402
from phaseconv.runtimes.litert import LiteRTSession, to_tflite  # noqa: E402


def operators(model: bytes) -> set[str]:
    from ai_edge_litert.interpreter import Interpreter

    return {op["op_name"] for op in Interpreter(model_content=model)._get_ops_details()}


@pytest.mark.slow  # 21 s of conversions; the stateful step below checks export_litert against eager in the default run
def test_export_litert_runs_in_litert_like_eager(tmp_path):
    """A SEANet decoder's transposed convolutions become convolutions and interleaves there too."""
    module, inputs = seanet_decoder(frames=2, latent=8, channels=32)
    module = phaseconv.prepare(module).eval()
    ep = export(module, *inputs)
    model, decisions = phaseconv.export_litert(ep, tmp_path / "m.tflite")
    assert (tmp_path / "m.tflite").read_bytes() == model
    assert any(d.rule == "conv_transpose" and d.applied for d in decisions), decisions
    assert "TRANSPOSE_CONV" not in operators(model) and "TRANSPOSE_CONV" in operators(to_tflite(ep))
    with torch.no_grad():
        expected = module(*inputs)
    (out,) = LiteRTSession(model).run(inputs)
    assert_close(out, expected, scale=float(expected.abs().max()))


def test_a_stateful_step_converts_with_its_state_as_inputs_and_outputs():
    """litert-torch alone drops buffer writes; here each call is fed the state the one before returned
    and matches eager over several calls; a call without state starts from the initial one, which
    the model's initial_state signature holds."""
    x = torch.randn(1, 4, 5)
    ep = export(CausalStep(), x)
    session = LiteRTSession(phaseconv.export_litert(ep)[0])
    assert len(session.state_names) == 2
    assert_close(session.initial_state[0], torch.zeros(1, 4, 2))
    assert_streams_like_eager(session, ep, x)


def test_for_x86_avx512_a_wide_3x3_convolution_is_winograd_in_litert_too():
    """The target's rules: F(2, 3x3) for 128 channels (the rules for any CPU leave it to LiteRT)."""
    x = torch.randn(1, 128, 8, 8)
    module = nn.Conv2d(128, 128, 3, padding=1).eval()
    ep = export(module, x)
    model, decisions = phaseconv.export_litert(ep, target="x86-avx512")
    assert any(d.rule == "winograd" and d.applied for d in decisions), decisions
    assert "DEPTHWISE_CONV_2D" in operators(model)  # its input transforms
    assert not any(d.rule == "winograd" for d in phaseconv.export_litert(ep)[1])
    with torch.no_grad():
        expected = module(x)
    assert_close(LiteRTSession(model).run((x,))[0], expected, scale=float(expected.abs().max()))
    with pytest.raises(PhaseconvError, match="rules or a target, not both"):
        phaseconv.export_litert(ep, rules=["conv_transpose"], target="x86-avx512")


def test_a_program_of_dynamic_length_is_refused():
    length = torch.export.Dim("length", min=2, max=16)
    ep = export(nn.ConvTranspose1d(4, 4, 4, 2), torch.randn(1, 4, 5), dynamic_shapes=({2: length},))
    with pytest.raises(PhaseconvError, match="static sizes"):
        phaseconv.export_litert(ep)


def test_a_session_refuses_the_wrong_number_of_inputs():
    session = LiteRTSession(to_tflite(export(CausalStep(), torch.randn(1, 4, 5))))
    with pytest.raises(PhaseconvError, match="takes 1 inputs, got 2"):
        session.run((torch.randn(1, 4, 5), torch.randn(1, 4, 5)))
    with pytest.raises(PhaseconvError, match="keeps 2 state tensors, got 1"):
        session.run((torch.randn(1, 4, 5),), (torch.zeros(1, 4, 2),))


def test_a_missing_litert_gets_the_install_hint(monkeypatch):
    from phaseconv.runtimes.litert import require_litert

    monkeypatch.setitem(__import__("sys").modules, "litert_torch", None)  # import litert_torch fails
    with pytest.raises(PhaseconvError, match=r"pip install 'phaseconv\[litert\]'"):
        require_litert()


def test_export_litert_refuses_what_is_not_a_program():
    with pytest.raises(TypeError, match="export the model first"):
        phaseconv.export_litert(nn.Conv1d(2, 2, 1))


def test_int8_export_runs_the_polyphase_form_in_int8_with_float_inputs_and_outputs():
    """With calibration inputs the rewritten program is quantized by litert-torch: the convolutions
    run on int8 tensors, the session quantizes the input and dequantizes the output with the model's
    scales, and the output stays close to eager."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(4, 16, 3, padding=1), nn.ReLU(), nn.ConvTranspose2d(16, 8, 4, 2, 1)).eval()
    inputs = (torch.randn(1, 4, 16, 16),)
    calibration = [inputs] + [(torch.randn(1, 4, 16, 16),) for _ in range(3)]
    model, decisions = phaseconv.export_litert(export(module, *inputs), calibration=calibration)
    assert any(d.rule == "conv_transpose" and d.applied for d in decisions), decisions
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_content=model).get_signature_runner().get_input_details()
    assert [d["dtype"].__name__ for d in details.values()] == ["int8"]
    assert "TRANSPOSE_CONV" not in operators(model)
    with torch.no_grad():
        expected = module(*inputs)
    session = LiteRTSession(model)
    (out,) = session.run(inputs)
    assert out.dtype == torch.float32 and out.shape == expected.shape
    assert snr_db(expected, out) > 30
    (raw,) = session.timed_call(inputs)().values()  # the interpreter's own output: int8
    assert raw.dtype.name == "int8" and raw.shape == tuple(expected.shape)


def test_int8_export_refuses_a_stateful_program_and_calibration_of_the_wrong_shape():
    ep = export(CausalStep(), torch.randn(1, 4, 5))
    with pytest.raises(PhaseconvError, match="without state"):
        phaseconv.export_litert(ep, calibration=[(torch.randn(1, 4, 5),)])
    ep = export(nn.Conv1d(4, 4, 3), torch.randn(1, 4, 5))
    with pytest.raises(PhaseconvError, match="calibration set 1"):
        phaseconv.export_litert(ep, calibration=[(torch.randn(1, 4, 6),)])


def test_a_failure_inside_litert_torchs_quantizer_is_one_line_that_names_it(monkeypatch):
    import phaseconv.runtimes.litert as litert

    def fails(ep, sets):
        raise AssertionError("please make sure only refer to edge or node that has observer inserted\nmore")

    monkeypatch.setattr(litert, "_int8_module", fails)
    ep = export(nn.Conv1d(4, 4, 3), torch.randn(1, 4, 5))
    with pytest.raises(
        PhaseconvError, match="^litert-torch's int8 quantization failed: AssertionError: please make.*inserted$"
    ):
        phaseconv.export_litert(ep, calibration=[(torch.randn(1, 4, 5),)])


def test_int64_inputs_are_given_as_the_int32_litert_torch_makes_them():
    """Mimi's decode(codes) takes int64 codes; the .tflite model takes int32."""
    torch.manual_seed(0)
    table, codes = nn.Embedding(10, 4).eval(), torch.tensor([[1, 5, 9]])
    session = LiteRTSession(to_tflite(export(table, codes)))
    (out,) = session.run((codes,))
    with torch.no_grad():
        assert_close(out, table(codes))
    with pytest.raises(PhaseconvError, match="does not fit the LiteRT model's int32"):
        session.run((torch.tensor([[1, 5, 2**40]]),))


@pytest.mark.parametrize("dims", [2, 1])
def test_group_norm_with_mean_averages_converts_and_runs_like_eager(dims):
    """litert-torch converts no linear over [N, G, C/G]: export_litert's group_norm averages by mean."""
    from phaseconv.rules.group_norm import GroupNormRule
    from tests.rules.test_group_norm import ConvNormAct

    x = torch.randn(1, 32, *([9, 7] if dims == 2 else [40]))
    module = ConvNormAct(dims, 32, 8).eval()
    model, decisions = phaseconv.export_litert(export(module, x), rules=[GroupNormRule(averages_as_linear=False)])
    assert any(d.rule == "group_norm" and d.applied for d in decisions), decisions
    with torch.no_grad():
        expected = module(x)
    assert_close(LiteRTSession(model).run((x,))[0], expected, scale=float(expected.abs().max()))
