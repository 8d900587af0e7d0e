"""The dense transposed-convolution rule on exported programs, against eager PyTorch."""

import io
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim
from torch.export.graph_signature import InputKind

import phaseconv
from phaseconv.math.polyphase import output_length
from phaseconv.rules.conv_transpose import ConvTransposeRule
from tests.helpers import (
    EXHAUSTIVE,
    assert_close,
    assert_one_partition_matching,
    decisions_of,
    export,
    rewrite_and_compare,
    run,
    transposed_convs,
)

CONV_TRANSPOSE = {1: nn.ConvTranspose1d, 2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}

CASES = {
    # name: (spatial, in, out, kernel, stride, padding, output_padding, dilation, input size)
    "mimi-k16-s8": (1, 8, 4, 16, 8, 0, 0, 1, 5),
    "dac-k16-s8-p4": (1, 8, 4, 16, 8, 4, 0, 1, 5),
    "kernel-not-multiple": (1, 3, 5, 7, 3, 2, 0, 1, 6),
    "kernel-shorter-than-stride": (1, 3, 5, 3, 2, 0, 1, 1, 4),
    "padding-over-block": (1, 3, 4, 12, 3, 7, 0, 1, 6),
    "output-padding-over-padding": (1, 3, 4, 8, 4, 1, 3, 1, 5),
    "dilation": (1, 3, 4, 4, 2, 1, 1, 2, 5),
    "length-1": (1, 6, 4, 10, 5, 0, 0, 1, 1),
    "2d-k4-s2-p1": (2, 4, 3, 4, 2, 1, 0, 1, 6),
    "2d-unequal": (2, 4, 3, (4, 6), (2, 3), (1, 0), (1, 2), 1, (5, 4)),
    "2d-dilation-output-padding": (2, 2, 3, 3, 2, 2, 1, (2, 1), 5),
    "2d-k2-s2-unet": (2, 4, 2, 2, 2, 0, 0, 1, 7),
    "3d-k4-s2-p1": (3, 2, 3, 4, 2, 1, 0, 1, 3),
    "3d-unequal": (3, 2, 2, (2, 3, 4), (1, 3, 2), (0, 1, 2), (0, 2, 1), 1, (2, 3, 2)),
    # ... and groups
    "grouped-g2": (1, 4, 6, 8, 4, 2, 0, 1, 5, 2),
    "depthwise-mimi-k4-s2": (1, 6, 6, 4, 2, 0, 0, 1, 5, 6),
    "depthwise-multiplier-2": (1, 3, 6, 5, 2, 1, 1, 1, 5, 3),
    "2d-depthwise-migan-k4-s2": (2, 4, 4, 4, 2, 1, 0, 1, 6, 4),
    "2d-depthwise-k3-dilation": (2, 3, 3, 3, 2, 1, 1, 2, 5, 3),
    "2d-grouped-unequal": (2, 4, 6, (3, 4), (2, 3), (1, 0), (1, 2), 1, (5, 4), 2),
    "3d-depthwise": (3, 2, 2, 2, 2, 0, 0, 1, 3, 2),
}


def make_case(name, bias=True, dtype=torch.float32, batch=2):
    spatial, c_in, c_out, k, s, p, op, d, size, *groups = CASES[name]
    torch.manual_seed(0)
    module = CONV_TRANSPOSE[spatial](c_in, c_out, k, s, p, op, groups=groups[0] if groups else 1, bias=bias, dilation=d)
    module = module.to(dtype)
    size = (size,) * spatial if isinstance(size, int) else size
    return module, torch.randn(batch, c_in, *size, dtype=dtype)


@pytest.mark.parametrize("decompose", [False, True], ids=["export", "core-aten"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager(name, bias, decompose):
    module, x = make_case(name, bias)
    rewrite_and_compare(module, x, decompose=decompose)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    "name", ["mimi-k16-s8", "dac-k16-s8-p4", "2d-k4-s2-p1", "output-padding-over-padding", "2d-depthwise-migan-k4-s2"]
)
def test_half_precision(name, dtype):
    module, x = make_case(name, dtype=dtype)
    rewritten = rewrite_and_compare(module, x)
    weights = [v for k, v in rewritten.state_dict.items() if "phases" in k]
    assert weights and all(w.dtype == dtype for w in weights)


def test_single_batch_and_single_step():
    module, x = make_case("mimi-k16-s8", batch=1)
    rewrite_and_compare(module, x[..., :1])


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_random_layers(data):
    draw = data.draw
    spatial = draw(st.integers(1, 2))
    stride = [draw(st.integers(1, 5)) for _ in range(spatial)]
    if all(s == 1 for s in stride):
        stride[0] = 2
    kernel = [draw(st.integers(s, 3 * s)) for s in stride]
    dilation = [draw(st.sampled_from([1, 1, 2])) for _ in range(spatial)]
    padding = [draw(st.integers(0, 6)) for _ in range(spatial)]
    output_padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
    size = [draw(st.integers(1, 5)) for _ in range(spatial)]
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float16]))
    if min(output_length(*a) for a in zip(size, stride, padding, dilation, kernel, output_padding)) < 1:
        return
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c_in = groups * draw(st.integers(1, 2))
    c_out = groups * draw(st.integers(1, 2))
    module = CONV_TRANSPOSE[spatial](
        c_in, c_out, kernel, stride, padding, output_padding, groups=groups, dilation=dilation
    ).to(dtype)
    x = torch.randn(draw(st.integers(1, 2)), module.in_channels, *size, dtype=dtype)
    ep = export(module, x)
    decisions = phaseconv.explain(ep, EXHAUSTIVE)
    rewritten = phaseconv.rewrite(ep, EXHAUSTIVE)
    expected, actual = run(ep, x), run(rewritten, x)
    assert_close(actual, expected, scale=float(expected.abs().max()))
    assert decisions[0].applied and transposed_convs(rewritten) == []


class CausalUpsampler(nn.Module):
    """Mimi's streaming form: ConvTranspose1d(k = 2s) then trim the last k - s outputs."""

    def __init__(self, c_in=6, c_out=4, stride=4):
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, 2 * stride, stride)
        self.trim = stride

    def forward(self, x):
        return self.conv(x)[..., : -self.trim]


def test_causal_trim_folds_into_the_window():
    x = torch.randn(1, 6, 7)
    rewritten = rewrite_and_compare(CausalUpsampler(), x)
    slices = [n for n in rewritten.graph.nodes if n.target == torch.ops.aten.slice.Tensor]
    assert slices == [], "a trim of whole phase blocks needs no crop"
    (decision,) = decisions_of("conv_transpose", export(CausalUpsampler(), x))
    assert "folded 1 slice" in decision.detail


class TwoDeconvsWithElu(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose1d(8, 6, 8, 4, 2)
        self.up2 = nn.ConvTranspose1d(6, 3, 6, 3)

    def forward(self, x):
        return self.up2(F.elu(self.up1(x)))


class Chained(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose2d(4, 4, 4, 2, 1)
        self.up2 = nn.ConvTranspose2d(4, 2, 3, 2, 1, 1)

    def forward(self, x):
        return self.up2(self.up1(x))


@pytest.mark.parametrize("module", [TwoDeconvsWithElu(), Chained()], ids=["elu-between", "one-feeds-another"])
def test_several_deconvolutions(module):
    x = torch.randn(1, module.up1.in_channels, *(5,) * (module.up1.weight.dim() - 2))
    rewrite_and_compare(module, x)


class SharedWeight(nn.Module):
    def __init__(self, second_stride, second_padding):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 3, 8))
        self.second = (second_stride, second_padding)

    def forward(self, x):
        a = F.conv_transpose1d(x, self.weight, stride=4, padding=2)
        b = F.conv_transpose1d(x, self.weight, stride=self.second[0], padding=self.second[1])
        return a.sum(-1) + b.sum(-1)


@pytest.mark.parametrize(
    ("second", "phase_weights"),
    [((2, 2), 2), ((4, 2), 1), ((4, 0), 1)],
    ids=["other-stride", "same-settings", "other-padding-same-stride"],
)
def test_shared_weight(second, phase_weights):
    """The phase weight depends on stride and dilation only: padding moves the window, not the weight."""
    x = torch.randn(1, 4, 5)
    rewritten = rewrite_and_compare(SharedWeight(*second), x)
    names = [k for k in rewritten.state_dict if "phases" in k]
    assert len(names) == phase_weights
    assert "weight" not in rewritten.state_dict, "the original weight is no longer read"


class OverlapAdd(nn.Module):
    """A streaming decoder's step: the deconv output plus the previous tail, with the bias removed
    from the tail so it is counted once. The bias is read by the deconv and by the subtraction."""

    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose1d(6, 4, 8, 4)

    def forward(self, x, previous_tail):
        y = self.conv(x)
        head = y[..., :4] + previous_tail - self.conv.bias[:, None]
        return torch.cat([head, y[..., 4:-4]], dim=-1), y[..., -4:]


def test_bias_read_by_another_op_stays_for_it():
    x, tail = torch.randn(1, 6, 5), torch.randn(1, 4, 4)
    ep = export(OverlapAdd(), x, tail)
    rewritten = phaseconv.rewrite(ep, rules=["conv_transpose"])  # constant_operands would lift bias[:, None]
    assert transposed_convs(rewritten) == []
    assert "conv.bias" in rewritten.state_dict and "conv.weight" not in rewritten.state_dict
    for actual, expected in zip(run(rewritten, x, tail), run(ep, x, tail)):
        assert_close(actual, expected)


class WeightKinds(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("persistent", torch.randn(4, 3, 8))
        self.register_buffer("transient", torch.randn(4, 3, 6), persistent=False)
        self.constant = torch.randn(4, 3, 4)  # a plain tensor attribute: a lifted constant

    def forward(self, x):
        a = F.conv_transpose1d(x, self.persistent, stride=4)
        b = F.conv_transpose1d(x, self.transient, stride=3)
        c = F.conv_transpose1d(x, self.constant, stride=2)
        return a.sum(-1) + b.sum(-1) + c.sum(-1)


def test_weights_keep_their_kind():
    x = torch.randn(1, 4, 5)
    rewritten = rewrite_and_compare(WeightKinds(), x)
    kinds = {spec.target: spec for spec in rewritten.graph_signature.input_specs if "phases" in (spec.target or "")}
    by_source = {next(s for s in ("persistent", "transient", "constant") if s in t): spec for t, spec in kinds.items()}
    assert by_source["persistent"].kind == InputKind.BUFFER and by_source["persistent"].persistent
    assert by_source["transient"].kind == InputKind.BUFFER and not by_source["transient"].persistent
    assert by_source["constant"].kind == InputKind.CONSTANT_TENSOR
    assert by_source["persistent"].target in rewritten.state_dict
    assert by_source["transient"].target in rewritten.constants
    assert by_source["constant"].target in rewritten.constants
    assert not any(spec.target in ("persistent", "transient") for spec in rewritten.graph_signature.input_specs)


def test_parameters_stay_parameters_and_metadata_is_kept():
    module, x = make_case("mimi-k16-s8")
    ep = export(module, x)
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name.startswith("p_"):
            node.meta["custom"] = {"delegate_constant_tag": f"tag_{node.name}"}
    rewritten = phaseconv.rewrite(ep)
    params = [s for s in rewritten.graph_signature.input_specs if s.kind == InputKind.PARAMETER]
    assert len(params) == 2 and all("phases" in s.target for s in params)
    placeholders = {n.name: n for n in rewritten.graph.nodes if n.op == "placeholder"}
    tags = {placeholders[s.arg.name].meta["custom"]["delegate_constant_tag"] for s in params}
    assert tags == {"tag_p_weight", "tag_p_bias"}


def test_weight_norm_is_folded():
    module = nn.utils.parametrizations.weight_norm(nn.ConvTranspose1d(6, 4, 8, 4, 2))
    x = torch.randn(1, 6, 5)
    for decompose in (False, True):
        rewritten = rewrite_and_compare(module, x, decompose=decompose)
        assert not any(k.startswith("parametrizations.") for k in rewritten.state_dict), rewritten.state_dict.keys()


def test_input_program_is_not_mutated():
    module, x = make_case("2d-k4-s2-p1")
    ep = export(module, x)
    graph_before, state_before = str(ep.graph), dict(ep.state_dict)
    specs_before = list(ep.graph_signature.input_specs)
    phaseconv.rewrite(ep)
    assert str(ep.graph) == graph_before
    assert ep.state_dict.keys() == state_before.keys()
    assert all(ep.state_dict[k] is v for k, v in state_before.items())
    assert list(ep.graph_signature.input_specs) == specs_before


def test_save_load_round_trip():
    x = torch.randn(1, 6, 7)
    rewritten = rewrite_and_compare(CausalUpsampler(), x)
    buffer = io.BytesIO()
    torch.export.save(rewritten, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    assert_close(run(loaded, x), run(rewritten, x))


def test_rewrite_rejects_what_is_not_an_exported_program():
    with pytest.raises(TypeError, match="got torch.nn.modules.conv.ConvTranspose1d"):
        phaseconv.rewrite(nn.ConvTranspose1d(2, 2, 4, 2))
    with pytest.raises(TypeError, match="got builtins.str"):
        phaseconv.explain("model.pt2")


class UserWeight(nn.Module):
    def forward(self, x, w):
        return F.conv_transpose1d(x, w, stride=2)


def _declined(module, *inputs, **export_kwargs):
    ep = export(module, *inputs, **export_kwargs)
    (decision,) = decisions_of("conv_transpose", ep)
    rewritten = phaseconv.rewrite(ep)
    assert not decision.applied
    assert transposed_convs(rewritten) == transposed_convs(ep)
    assert_close(run(rewritten, *inputs), run(ep, *inputs))
    return decision.reason


def test_depthwise_is_one_conv_per_phase_and_a_cat():
    module, x = make_case("2d-depthwise-migan-k4-s2")
    rewritten = rewrite_and_compare(module, x)
    convs = [n for n in rewritten.graph.nodes if n.target == torch.ops.aten.conv2d.default]
    assert len(convs) == 4 and all(n.args[-1] == 4 for n in convs), "four depthwise convs, one per phase"
    assert sum(n.target == torch.ops.aten.cat.default for n in rewritten.graph.nodes) == 1
    assert [k for k in rewritten.state_dict if "bias" in k] == ["p_bias_j0", "p_bias_j1", "p_bias_j2", "p_bias_j3"]


class ConvThenDepthwiseUp(nn.Module):
    """MI-GAN's up-filter after a conv, so its input is channels-last inside XNNPACK."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 1)
        self.up = nn.ConvTranspose2d(8, 8, 4, 2, 1, groups=8)

    def forward(self, x):
        return self.up(self.conv(x))


def test_cropped_depthwise_phases_read_their_own_samples_and_xnnpack_folds_the_pads():
    """k4 s2 p1 crops one output at each end: each phase conv reads its own input window (a zero pad
    on one side), so no slice follows the interleave, and XNNPACK runs no pad of its own."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.etdump import operator_times

    torch.manual_seed(0)
    module, x = ConvThenDepthwiseUp().eval(), torch.randn(1, 8, 6, 5)
    rewritten = rewrite_and_compare(module, x)
    targets = [n.target for n in rewritten.graph.nodes]
    assert torch.ops.aten.slice.Tensor not in targets
    assert targets.count(torch.ops.aten.constant_pad_nd.default) == 4, "one pad per phase, [1, 0] or [0, 1] per axis"
    assert_one_partition_matching(rewritten, export(module, x), x)
    kinds = {t.kind for t in operator_times(to_xnnpack(rewritten).buffer, (x,), runs=1)}
    assert not any("Pad" in kind or "Slice" in kind for kind in kinds), kinds
    kept = phaseconv.rewrite(export(module, x), [ConvTransposeRule(crop_by_phase=False)])
    assert [n.target for n in kept.graph.nodes].count(torch.ops.aten.slice.Tensor) == 2, "the crop, one per axis"


def test_declines_stride_one():
    assert "stride 1" in _declined(nn.ConvTranspose1d(4, 4, 3), torch.randn(1, 4, 5))


def test_declines_weight_from_an_input():
    assert "program input" in _declined(UserWeight(), torch.randn(1, 4, 5), torch.randn(4, 2, 4))


def test_declines_when_zero_taps_outweigh_the_gain():
    reason = _declined(nn.ConvTranspose1d(4, 4, 1, 4), torch.randn(1, 4, 5))
    assert "multiply-adds" in reason


def test_explain_reports_every_candidate_with_its_rule():
    module = TwoDeconvsWithElu()
    decisions = phaseconv.explain(export(module, torch.randn(1, 8, 5)))
    assert [(d.rule, d.applied, d.reason) for d in decisions] == [
        ("conv_transpose", True, ""),
        ("elu", True, ""),
        ("conv_transpose", True, ""),
    ]
    assert [d.node for d in decisions] == ["conv_transpose1d", "elu", "conv_transpose1d_1"]
    only = phaseconv.explain(export(module, torch.randn(1, 8, 5)), rules=["conv_transpose"])
    assert [d.rule for d in only] == ["conv_transpose"] * 2


@pytest.mark.parametrize(
    "activation", [nn.ReLU(), nn.Hardtanh(-0.5, 0.5), nn.ReLU6()], ids=["relu", "hardtanh", "relu6"]
)
@pytest.mark.parametrize("name", ["2d-k4-s2-p1", "dac-k16-s8-p4", "2d-depthwise-migan-k4-s2"])
def test_activation_moves_before_the_interleave(name, activation):
    """Elementwise, so it commutes with the interleave and the crop; next to the conv XNNPACK fuses it."""
    module, x = make_case(name)
    model = nn.Sequential(module, activation)
    commuting = [ConvTransposeRule(max_mac_overhead=math.inf, commute_activations=True)]
    rewritten = rewrite_and_compare(model, x, rules=commuting)
    (decision,) = decisions_of("conv_transpose", export(model, x), commuting)
    assert "before the interleave" in decision.detail
    conv_ops = (torch.ops.aten.conv1d.default, torch.ops.aten.conv2d.default)
    convs = [n for n in rewritten.graph.nodes if n.target in conv_ops]
    readers = [user.target for conv in convs for user in conv.users]
    assert convs and torch.ops.aten.view.default not in readers, "activation first"


def test_activation_with_other_readers_stays_after():
    class TwoReaders(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose1d(4, 4, 8, 4)

        def forward(self, x):
            y = self.up(x)
            return torch.relu(y) + y

    x = torch.randn(1, 4, 5)
    commuting = [ConvTransposeRule(commute_activations=True)]
    rewrite_and_compare(TwoReaders(), x, rules=commuting)
    (decision,) = decisions_of("conv_transpose", export(TwoReaders(), x), commuting)
    assert "before the interleave" not in decision.detail


@pytest.mark.parametrize("name", ["2d-k4-s2-p1", "depthwise-mimi-k4-s2", "grouped-g2"])
def test_dynamic_batch(name):
    """Only spatial sizes must be static: the interleave's views take -1 for the batch."""
    module, x = make_case(name)
    ep = export(module, x, dynamic_shapes=({0: Dim("batch", min=1, max=8)},))
    rewritten = phaseconv.rewrite(ep, EXHAUSTIVE)
    assert transposed_convs(rewritten) == []
    for batch in (1, 3):
        other = torch.randn(batch, *x.shape[1:])
        assert_close(run(rewritten, other), run(ep, other))
