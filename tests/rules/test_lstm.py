"""lstm: the recurrence unrolled into delegated ops, same outputs as PyTorch's LSTM."""

import pytest
import torch
from torch import nn

import phaseconv
from tests.helpers import assert_close, assert_one_partition_matching, export, run


class SkipLstm(nn.Module):
    """EnCodec's block: [N, C, T] -> LSTM over T -> + input."""

    def __init__(self, channels=8, layers=2, bias=True, with_state=False):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 1)
        self.lstm = nn.LSTM(channels, channels, layers, bias=bias)
        self.with_state = with_state
        self.register_buffer("h0", torch.randn(layers, 1, channels))
        self.register_buffer("c0", torch.randn(layers, 1, channels))

    def forward(self, x):
        x = self.conv(x).permute(2, 0, 1)
        y = self.lstm(x, (self.h0, self.c0))[0] if self.with_state else self.lstm(x)[0]
        return (y + x).permute(1, 2, 0)


@pytest.mark.parametrize(
    "layers, bias, with_state",
    [
        pytest.param(2, True, False, marks=pytest.mark.slow),
        (1, False, False),
        pytest.param(2, True, True, marks=pytest.mark.slow),  # 21 s here
    ],
)
def test_lstm_unrolled_matches_and_is_delegated(layers, bias, with_state):
    x = torch.randn(1, 8, 6)
    ep = export(SkipLstm(layers=layers, bias=bias, with_state=with_state), x)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "lstm"]
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    assert "aten.lstm.input" not in {str(n.target) for n in rewritten.graph.nodes}
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)


class FinalState(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 4)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return y, h


def test_lstm_whose_final_state_is_used_is_declined():
    (decision,) = [d for d in phaseconv.explain(export(FinalState(), torch.randn(3, 1, 4))) if d.rule == "lstm"]
    assert not decision.applied and "final hidden" in decision.reason


class OutputOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 4)

    def forward(self, x):
        return self.lstm(x)[0]


def test_lstm_whose_final_state_nothing_reads_is_rewritten():
    """torch.export.export keeps getitems of the final states that nothing reads: the rule alone
    (no earlier stage has dropped them) takes the LSTM and drops them."""
    x = torch.randn(3, 1, 4)
    ep = torch.export.export(OutputOnly().eval(), (x,))
    (decision,) = phaseconv.explain(ep, ["lstm"])
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep, ["lstm"])
    assert "aten.lstm.input" not in {str(n.target) for n in rewritten.graph.nodes}
    assert_close(run(rewritten, x), run(ep, x))
