"""pocket-tts's flow language model as two steps over a KV cache kept in buffers.

pocket-tts generates one latent frame per call of `FlowLMModel`: its transformer appends the
step's keys and values to a cache that grows with the utterance (`complete_kv`, an offset read
with `.item()`), then a flow head turns the last hidden state and Gaussian noise into the next
latent, and a linear layer gives the end-of-speech logit. Here the cache has a fixed capacity and
the caller names the positions of each call's tokens:

    prompt(embeddings [1, T, D], positions [T]) -> hidden [1, D]         (voice or text conditioning)
    generate(latent, start, noise, positions [1]) -> (latent, eos_logit)  (one frame)

`CachedAttention` replaces `StreamingMultiheadAttention`: the same projections and RoPE, and the
same mask rule (a token at position p sees the keys at positions <= p), over the cache's slots
before the call's first position and over the call's own keys. The cache is read where it lies
(two matrix products each, no copy of it) and written after, at `positions`.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import nn

from phaseconv.errors import PhaseconvError

# Added to the scores of masked keys: exp(score - 1e30 - max) is exactly 0 in float32, as with -inf,
# and 0 * NEG stays 0 where -inf would make NaN.
MASKED = -1e30


def attention_masks(first: torch.Tensor, steps: int, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive masks of `steps` tokens at positions first, first + 1, ... over the cache's slots
    [1, capacity] and over their own keys [steps, steps]:

        cached slot j: attended iff j < first          own key i by query r: attended iff i <= r
    """
    slots, own = torch.arange(capacity, dtype=torch.float32), torch.arange(steps, dtype=torch.float32)
    return (slots - first + 1).clamp(0, 1)[None] * MASKED, (own[None] - own[:, None]).clamp(0, 1) * MASKED


class CachedAttention(nn.Module):
    """pocket-tts's StreamingMultiheadAttention over a KV cache of `capacity` positions.

    State: `keys` [H_kv, D, capacity] (transposed: scores are q @ keys) and `values`
    [H_kv, capacity, D]. Grouped-query attention reads each key/value head once: the g query heads
    that share it are stacked as rows of one product.
    """

    def __init__(self, attention: nn.Module, capacity: int):
        super().__init__()
        self.attention = attention
        heads, width = attention.num_kv_heads, attention.dim_per_head
        self.register_buffer("keys", torch.zeros(heads, width, capacity))
        self.register_buffer("values", torch.zeros(heads, capacity, width))

    def forward(self, query: torch.Tensor, call: dict, attn_mask=None) -> torch.Tensor:
        a = self.attention
        projected = a.in_proj(query)
        _, t, _ = projected.shape
        d, kv_heads = a.dim_per_head, a.num_kv_heads
        group = a.num_heads // kv_heads
        q = projected[..., : a.attn_dim].view(1, t, a.num_heads, d)
        k, v = torch.unbind(projected[..., a.attn_dim :].view(1, t, 2, kv_heads, d), dim=2)
        q, k = a.rope(q, k, offset=call["first"])
        q = q[0].view(t, kv_heads, group, d).permute(1, 2, 0, 3).reshape(kv_heads, group * t, d) * d**-0.5
        new_keys = k[0].permute(1, 2, 0)  # [H_kv, D, T]
        new_values = v[0].permute(1, 0, 2)  # [H_kv, T, D]
        capacity = self.keys.shape[-1]
        cached_mask, own_mask = call["masks"]
        own_mask = torch.cat([own_mask] * group) if group > 1 else own_mask  # each query head's rows
        scores = torch.cat([torch.bmm(q, self.keys) + cached_mask, torch.bmm(q, new_keys) + own_mask], dim=-1)
        cached, own = torch.softmax(scores, dim=-1).split([capacity, t], dim=-1)
        x = torch.bmm(cached, self.values) + torch.bmm(own, new_values)
        self.keys.index_copy_(2, call["positions"], new_keys)
        self.values.index_copy_(1, call["positions"], new_values)
        x = x.view(kv_heads, group, t, d).permute(2, 0, 1, 3).reshape(1, t, a.num_heads * d)
        return a.out_proj(x)


def with_cache(flow_lm: nn.Module, capacity: int) -> nn.Module:
    """A copy of pocket-tts's FlowLMModel whose attention layers keep a cache of `capacity` positions."""
    from pocket_tts.modules.attention import StreamingMultiheadAttention

    flow_lm = _without_tokenizer_copy(flow_lm)
    for layer in flow_lm.transformer.layers:
        if not isinstance(layer.self_attn, StreamingMultiheadAttention):
            raise PhaseconvError(f"unexpected attention {type(layer.self_attn).__name__} in the flow LM")
        layer.self_attn = CachedAttention(layer.self_attn, capacity)
    return flow_lm.eval()


def _without_tokenizer_copy(flow_lm: nn.Module) -> nn.Module:
    """A deep copy of the module; the tokenizer (a C++ object that does not copy) is shared."""
    tokenizer = flow_lm.conditioner.tokenizer
    flow_lm.conditioner.tokenizer = None
    try:
        copied = copy.deepcopy(flow_lm)
    finally:
        flow_lm.conditioner.tokenizer = tokenizer
    copied.conditioner.tokenizer = tokenizer
    return copied


# The language model's linear layers quantized as ExecuTorch's LLM export does (`--qlinear`): int8
# activations quantized at run time and int4 or int8 weights, which XNNPACK runs as such.
LINEAR_QUANTIZATION = {"8da4w": torch.int4, "8da8w": torch.int8}
GROUP_SIZE = 32


def quantize_linears(flow_lm: nn.Module, scheme: str) -> None:
    """Every linear layer of the transformer and the flow head in `scheme` (8da4w or 8da8w), with
    weights in groups of 32 input channels (per output channel where 32 does not divide them). The
    EOS logit and the input projection stay float32: one row, and 32 inputs."""
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

    if scheme not in LINEAR_QUANTIZATION:
        raise PhaseconvError(f"unknown quantization {scheme!r}; known: {', '.join(LINEAR_QUANTIZATION)}")
    for grouped in (True, False):
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=LINEAR_QUANTIZATION[scheme],
            weight_granularity=PerGroup(GROUP_SIZE) if grouped else PerAxis(0),
            intx_choose_qparams_algorithm="hqq_scale_only",
        )

        def chosen(module, name, grouped=grouped):
            return (
                isinstance(module, nn.Linear)
                and name.startswith(("transformer.", "flow_net."))
                and (module.in_features % GROUP_SIZE == 0) == grouped
            )

        quantize_(flow_lm, config, filter_fn=chosen)


def _call(positions: torch.Tensor, steps: int, capacity: int) -> dict:
    """What every layer reads for a call: the first position (RoPE's offset), the mask, where to write."""
    first = positions[:1].to(torch.float32)
    return {"first": first, "masks": attention_masks(first, steps, capacity), "positions": positions}


def capacity_of(flow_lm: nn.Module) -> int:
    return flow_lm.transformer.layers[0].self_attn.keys.shape[-1]


class Prompt(nn.Module):
    """Conditioning tokens (text embeddings or a voice's projected latents) through the transformer:
    their keys and values written at `positions`; returns the last token's normalized hidden state."""

    def __init__(self, flow_lm: nn.Module):
        super().__init__()
        self.transformer, self.out_norm = flow_lm.transformer, flow_lm.out_norm

    def forward(self, embeddings: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        capacity = self.transformer.layers[0].self_attn.keys.shape[-1]
        hidden = self.transformer(embeddings, _call(positions, embeddings.shape[1], capacity))
        return self.out_norm(hidden[:, -1])


class Generate(nn.Module):
    """One frame of `FlowLMModel.forward` in generation: the previous latent (the learned BOS when
    `start` is 1) in, the next latent and the end-of-speech logit out; `noise` [1, ldim] is the flow's
    starting point (zeros at temperature 0), drawn by the caller as pocket-tts draws it."""

    def __init__(self, flow_lm: nn.Module, decode_steps: int = 1):
        super().__init__()
        from pocket_tts.models import flow_lm as module

        self.transformer, self.out_norm = flow_lm.transformer, flow_lm.out_norm
        self.input_linear, self.z_proj, self.out_eos = flow_lm.input_linear, flow_lm.z_proj, flow_lm.out_eos
        self.flow_net, self.bos_emb = flow_lm.flow_net, flow_lm.bos_emb
        decoders = {
            "lsd": module.lsd_decode,
            "flow_matching": module.ot_decode,
            "drifting": module.drifting_decode,
            "pointwise": module.pointwise_decode,
        }
        if flow_lm.flow_type not in decoders:
            raise PhaseconvError(f"unknown flow head type {flow_lm.flow_type!r}; known: {', '.join(decoders)}")
        self.sample = functools.partial(decoders[flow_lm.flow_type], num_steps=decode_steps)

    def forward(
        self, latent: torch.Tensor, start: torch.Tensor, noise: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # pocket-tts marks the first frame with NaN and swaps in bos_emb; here a flag does (0 or 1)
        sequence = latent * (1 - start) + self.bos_emb * start
        capacity = self.transformer.layers[0].self_attn.keys.shape[-1]
        hidden = self.out_norm(self.transformer(self.input_linear(sequence), _call(positions, 1, capacity)))
        if self.z_proj is not None:
            hidden = self.z_proj(hidden)
        hidden = hidden[:, -1]
        eos_logit = self.out_eos(hidden)
        return self.sample(functools.partial(self.flow_net, hidden), noise)[:, None], eos_logit


class ClearCache(nn.Module):
    """Every slot of the cache to zero. A slot past a call's first position is masked, but enters
    the products with weight 0, and 0 * NaN is NaN: a cache must hold numbers before its first use,
    and ExecuTorch starts a buffer that methods share from uninitialized memory."""

    def __init__(self, flow_lm: nn.Module):
        super().__init__()
        self.transformer = flow_lm.transformer

    def forward(self) -> torch.Tensor:
        for layer in self.transformer.layers:
            for cache in (layer.self_attn.keys, layer.self_attn.values):
                cache.copy_(torch.zeros_like(cache))
        return torch.zeros(1)
