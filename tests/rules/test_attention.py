"""attention: scaled_dot_product_attention with a constant mask as bmm + softmax, delegated."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from phaseconv.runtimes.executorch import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, assert_one_partition_matching, export, run


class SelfAttention(nn.Module):
    """Heads 2, width 8; mask: "causal" (is_causal), "shape" (built from shapes, boolean), "float" or None."""

    def __init__(self, mask=None, scale=None):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.mask, self.scale = mask, scale

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = (proj(x).view(batch, length, 2, 8).transpose(1, 2) for proj in (self.q, self.k, self.v))
        kwargs = {"scale": self.scale}
        if self.mask == "causal":
            kwargs["is_causal"] = True
        elif self.mask == "shape":
            kwargs["attn_mask"] = x.new_ones(length, length).tril().bool()
        elif self.mask == "float":
            kwargs["attn_mask"] = x.new_ones(length, length).triu(1) * -1e4
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


@pytest.mark.parametrize("mask", [None, "causal", "shape", "float"])
def test_attention_is_bmm_and_softmax_in_one_partition(mask):
    x = torch.randn(1, 5, 16)
    ep = export(SelfAttention(mask, scale=0.3 if mask == "float" else None), x)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "attention"]
    assert decision.applied, decision
    rewritten = phaseconv.rewrite(ep)
    assert "aten.scaled_dot_product_attention.default" not in {str(n.target) for n in rewritten.graph.nodes}
    assert_close(run(rewritten, x), run(ep, x))
    assert_one_partition_matching(rewritten, ep, x)
    stock = summarize_pte(to_xnnpack(ep).buffer)
    if mask in ("causal", "shape"):
        assert stock.outside, "stock ExecuTorch runs the boolean-mask softmax outside the delegate"


class FullyMaskedRow(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.ones(4, 4, dtype=torch.bool).index_fill(0, torch.tensor([0]), False))

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


class MaskWrittenInPlace(nn.Module):
    def forward(self, q, k, v):
        mask = torch.ones(4, 4, dtype=torch.bool)
        mask[0, 1:] = False  # the value read by attention is not the value `ones` computes
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_fully_masked_row_is_declined():
    q = torch.randn(1, 2, 4, 8)
    (decision,) = [d for d in phaseconv.explain(export(FullyMaskedRow(), q, q, q)) if d.rule == "attention"]
    assert not decision.applied and "every key masked" in decision.reason


def test_a_mask_written_in_place_is_not_taken_for_its_first_value():
    q = torch.randn(1, 2, 4, 8)
    ep = export(MaskWrittenInPlace(), q, q, q)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "attention"]
    assert not decision.applied and "written in place" in decision.reason
    assert_close(run(phaseconv.rewrite(ep), q, q, q), run(ep, q, q, q))


class InputMask(nn.Module):
    def forward(self, q, mask):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_a_mask_given_as_input_is_declined():
    q, mask = torch.randn(1, 2, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    (decision,) = [d for d in phaseconv.explain(export(InputMask(), q, mask)) if d.rule == "attention"]
    assert not decision.applied and "not known ahead of time" in decision.reason
