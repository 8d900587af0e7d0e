"""Shared steps of the tests: export, rewrite, compare with eager, look inside graphs."""

from __future__ import annotations

import copy
import math

import torch
from torch.export import ExportedProgram

import phaseconv
from phaseconv.rules.conv_transpose import ConvTransposeRule, parse_conv_transpose

# Every case the math covers, whether or not it pays on XNNPACK: for exactness tests.
EXHAUSTIVE = [ConvTransposeRule(max_mac_overhead=math.inf)]

TOLERANCE = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    torch.float64: {"rtol": 1e-7, "atol": 1e-9},
    torch.float16: {"rtol": 1e-2, "atol": 1e-2},
    torch.bfloat16: {"rtol": 5e-2, "atol": 5e-2},
}


def export(module: torch.nn.Module, *inputs: torch.Tensor, decompose: bool = False, **kwargs) -> ExportedProgram:
    ep = torch.export.export(module.eval(), inputs, **kwargs)
    return ep.run_decompositions() if decompose else ep


def transposed_convs(ep: ExportedProgram) -> list[str]:
    return [n.name for n in ep.graph.nodes if parse_conv_transpose(n) is not None]


def decisions_of(rule: str, ep: ExportedProgram, rules=None) -> list:
    """phaseconv.explain(ep, rules), the decisions of one rule only."""
    return [d for d in phaseconv.explain(ep, rules) if d.rule == rule]


def run(ep: ExportedProgram, *inputs: torch.Tensor):
    with torch.no_grad():
        return ep.module()(*inputs)


def assert_close(actual, expected, scale: float = 1.0) -> None:
    tol = TOLERANCE[expected.dtype]
    torch.testing.assert_close(actual, expected, rtol=tol["rtol"], atol=tol["atol"] * max(1.0, scale))


def rewrite_applying(rule: str, ep: ExportedProgram, *inputs: torch.Tensor) -> ExportedProgram:
    """phaseconv.rewrite(ep), after checking that `rule` applies to its one candidate; the result matches
    eager on `inputs` (tolerance scaled by the output's magnitude) and keeps no constant that nothing reads."""
    (decision,) = decisions_of(rule, ep)
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    expected = run(ep, *inputs)
    assert_close(run(rewritten, *inputs), expected, scale=float(expected.abs().max()))
    unread = [n.name for n in rewritten.graph.nodes if n.op == "placeholder" and not n.users]
    assert not unread, f"constants left with no reader: {unread}"
    return rewritten


def lower_and_run(ep: ExportedProgram, *inputs: torch.Tensor):
    """Lower to XNNPACK, load the bytes with the ExecuTorch runtime, run: (delegation summary, outputs)."""
    from phaseconv.lowering.xnnpack import to_xnnpack
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.pte import summarize_pte

    buffer = to_xnnpack(ep).buffer
    return summarize_pte(buffer), LoadedProgram(buffer).run(inputs)


# What a stateful program leaves outside the delegate: the write-back of each state buffer.
STATE_WRITES = frozenset({"aten::copy_"})


def assert_one_partition_matching(
    rewritten: ExportedProgram,
    reference: ExportedProgram,
    *inputs: torch.Tensor,
    scaled: bool = False,
    outside_allowed: frozenset[str] = frozenset(),
):
    """The rewritten program lowers to one XNNPACK partition with nothing outside (but the ops in
    `outside_allowed`), and its runtime outputs match eager on the reference program (absolute
    tolerance scaled by the output's magnitude when `scaled`). Returns the delegation summary and
    the runtime outputs."""
    summary, outputs = lower_and_run(rewritten, *inputs)
    assert summary.partitions == 1 and set(summary.outside) <= outside_allowed, summary
    expected = run(reference, *inputs)
    for actual, wanted in zip(outputs, expected if isinstance(expected, (tuple, list)) else [expected], strict=True):
        assert_close(actual, wanted, scale=float(wanted.abs().max()) if scaled else 1.0)
    return summary, outputs


def rewrite_and_compare(
    module: torch.nn.Module, *inputs: torch.Tensor, decompose: bool = False, rules=EXHAUSTIVE
) -> ExportedProgram:
    """Rewrite the exported module, check every transposed conv is gone and outputs match eager."""
    ep = export(module, *inputs, decompose=decompose)
    rewritten = phaseconv.rewrite(ep, rules)
    assert transposed_convs(rewritten) == [], phaseconv.explain(ep, rules)
    expected = run(ep, *inputs)
    actual = run(rewritten, *inputs)
    assert actual.shape == expected.shape
    assert_close(actual, expected, scale=float(expected.abs().max()))
    return rewritten


# A small transformers MimiConfig (decoder transformer, SEANet with strides 4 and 2, 4 codebooks).
TINY_MIMI = dict(
    hidden_size=32,
    num_filters=4,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=64,
    upsample_groups=32,
    upsampling_ratios=[4, 2],
    codebook_dim=16,
    codebook_size=64,
    num_quantizers=4,
    num_semantic_quantizers=1,
    vector_quantization_hidden_dimension=16,
)


# A small transformers DacConfig (decoder strides 4 and 2, hop 8, 2 codebooks).
TINY_DAC = dict(
    encoder_hidden_size=4,
    decoder_hidden_size=32,
    hidden_size=16,
    downsampling_ratios=[2, 4],
    upsampling_ratios=[4, 2],
    hop_length=8,
    n_codebooks=2,
    codebook_dim=4,
)


class PaddedConv(torch.nn.Module):
    """F.pad(x, pad) then Conv1d: a causal (or any) zero-padded convolution, as SEANet's."""

    def __init__(self, taps=7, pad=(6, 0), stride=1, dilation=1, padding=0, channels=(8, 16)):
        super().__init__()
        self.conv = torch.nn.Conv1d(*channels, taps, stride=stride, dilation=dilation, padding=padding)
        self.pad = pad

    def forward(self, x):
        return self.conv(torch.nn.functional.pad(x, self.pad))


class CausalStep(torch.nn.Module):
    """A streaming step: a k3 convolution over the last 2 inputs of the call before (kept in a
    buffer) and this call's, scaled by the number of calls (a second buffer)."""

    def __init__(self, channels=(4, 6)):
        super().__init__()
        self.conv = torch.nn.Conv1d(*channels, 3)
        self.register_buffer("previous", torch.zeros(1, channels[0], 2))
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        full = torch.cat([self.previous, x], -1)
        self.previous.copy_(full[..., -2:])
        self.count.add_(1)
        return self.conv(full) * self.count


def assert_streams_like_eager(session, ep: ExportedProgram, x: torch.Tensor, calls: int = 4) -> None:
    """A peer runtime's session of a CausalStep program (state as inputs and outputs): a call without
    state starts from the initial one; each later call, fed the state the one before returned,
    matches eager, and its count state says how many calls came before."""
    reference, state = copy.deepcopy(ep.module()), ()  # ep.module() shares the program's buffers
    with torch.no_grad():
        assert_close(session.run((x,))[0], copy.deepcopy(ep.module())(x))
        for call in range(calls):
            x = torch.randn(x.shape)
            out, *state = session.run((x,), tuple(state))
            assert_close(out, reference(x))
            assert float(state[1]) == call + 1
