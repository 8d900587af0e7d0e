"""attention: scaled_dot_product_attention with a constant mask as bmm + softmax, delegated."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import STATE_WRITES, assert_close, assert_one_partition_matching, export, run


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


def test_a_mask_written_in_place_is_taken_with_its_written_value():
    # The program is made functional first, so the mask is the value after the write, not `ones`.
    q = torch.randn(1, 2, 4, 8)
    ep = export(MaskWrittenInPlace(), q, q, q)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "attention"]
    assert decision.applied, decision
    assert_close(run(phaseconv.rewrite(ep), q, q, q), run(ep, q, q, q))


class InputMask(nn.Module):
    def forward(self, q, mask):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_a_mask_given_as_input_is_declined():
    q, mask = torch.randn(1, 2, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    (decision,) = [d for d in phaseconv.explain(export(InputMask(), q, mask)) if d.rule == "attention"]
    assert not decision.applied and "not known ahead of time" in decision.reason


class CachedAttention(nn.Module):
    """Attention over a cache whose first slots are empty at the start: an additive run-time mask,
    a cat of the cached keys' part (constant window + run-time validity) and the own keys' part."""

    def __init__(self, own_mask: torch.Tensor):
        super().__init__()
        self.register_buffer("keys", torch.randn(1, 2, 4, 8))
        self.register_buffer("key_bias", torch.tensor([float("-inf"), float("-inf"), 0.0, 0.0]))
        self.register_buffer("own_mask", own_mask)

    def forward(self, q, k, v):
        keys = torch.cat([self.keys, k], dim=2)
        mask = torch.cat([torch.zeros(3, 4) + self.key_bias, self.own_mask], dim=-1)
        out = F.scaled_dot_product_attention(q, keys, torch.cat([self.keys, v], dim=2), mask)
        self.key_bias.copy_(torch.cat([self.key_bias, torch.zeros(3)])[-4:])  # state: the mask changes per call
        return out


def test_runtime_mask_with_a_constant_part_that_keeps_every_row_is_added_as_it_is():
    causal = torch.zeros(3, 3).masked_fill(torch.ones(3, 3).triu(1).bool(), float("-inf"))
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    ep = export(CachedAttention(causal), q, k, v)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "attention"]
    assert decision.applied and "run-time mask" in decision.detail, decision
    rewritten = phaseconv.rewrite(ep)
    assert_close(run(rewritten, q, k, v), run(ep, q, k, v))
    assert_one_partition_matching(rewritten, ep, q, k, v, outside_allowed=STATE_WRITES)


def test_runtime_mask_that_could_mask_a_whole_row_is_declined():
    fully_masked_row = torch.zeros(3, 3)
    fully_masked_row[0] = float("-inf")
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    ep = export(CachedAttention(fully_masked_row), q, k, v)
    (decision,) = [d for d in phaseconv.explain(ep) if d.rule == "attention"]
    assert not decision.applied and "every query row" in decision.reason


class TransposedKeys(nn.Module):
    """Keys kept as [B, H, D, S] (a cache laid out for q @ K): attention gets keys.transpose(-1, -2)."""

    def forward(self, q, keys_t, v):
        return F.scaled_dot_product_attention(q, keys_t.transpose(-1, -2), v)


def test_keys_given_transposed_are_read_without_a_permute():
    q, keys_t, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 8, 5), torch.randn(1, 2, 5, 8)
    ep = export(TransposedKeys(), q, keys_t, v)
    rewritten = phaseconv.rewrite(ep)
    assert not [n for n in rewritten.graph.nodes if n.target == torch.ops.aten.permute_copy.default]
    assert_close(run(rewritten, q, keys_t, v), run(ep, q, keys_t, v))
    assert_one_partition_matching(rewritten, ep, q, keys_t, v)
