"""pocket-tts's flow language model as two steps over a KV cache kept in buffers.

pocket-tts generates one latent frame per call of `FlowLMModel`: its transformer appends the
step's keys and values to a cache that grows with the utterance (`complete_kv`, an offset read
with `.item()`), then a flow head turns the last hidden state and Gaussian noise into the next
latent, and a linear layer gives the end-of-speech logit. Here the cache has a fixed capacity, in
blocks of 64 positions, and the caller names the positions of each call's tokens:

    Prompt(flow_lm, block b): (embeddings [1, T, D], positions [T]) -> hidden [1, D]
                                                           (voice or text conditioning at positions
                                                           in blocks 0 .. b)
    Generate(flow_lm, block b, first_block a): (latent, start, noise, positions [1]) -> (latent, eos_logit)
                                                           (one frame at a position in blocks a .. b,
                                                           reading blocks 0 .. b)
    FirstFrame(flow_lm, block b): (embeddings [1, T, D], positions [T + 1], noise) -> (latent, eos_logit)
                                                           (a chunk's last text tokens, then its first
                                                           frame, as Prompt then Generate from the start)
    LoadVoice: (state [L, 2, T, H, D], positions [T])      (a voice state, as pocket-tts keeps it,
                                                           into the cache)
    ReadVoice: (positions [T]) -> state [L, 2, T, H, D]    (the cache at those positions)

A call's positions may end with PAD: such a token's keys and values go to the spill slots and no
query attends them, so a call of a fixed number of tokens serves any number up to it.

`CachedAttention` replaces `StreamingMultiheadAttention`: the same projections and RoPE, and the
same mask rule (a token at position p sees the keys at positions <= p), over the cache's slots
before the call's first position and over the call's own keys. The cache is read where it lies
(two matrix products per block, no copy of it) and written after, at `positions`. A frame reads
only the blocks up to its own, and a prompt those up to its last position, so their attention and
writes cost what the utterance so far holds, not the capacity.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from phaseconv.errors import PhaseconvError
from phaseconv.models.sharing import copy_sharing_parameters

# Added to the scores of masked keys: exp(score - 1e30 - max) is exactly 0 in float32, as with -inf,
# and 0 * NEG stays 0 where -inf would make NaN.
MASKED = -1e30
# Positions per block of the KV cache: attention reads only the blocks that hold positions, so its
# products grow with the text, not with the cache.
CACHE_BLOCK = 64


def attention_masks(
    first: torch.Tensor, steps: int, slots: torch.Tensor, group: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive masks of `steps` tokens at positions first, first + 1, ... over cache slots that hold
    the positions `slots` [S] (float) [1, S] and over their own keys [group * steps, steps] (the rows
    of `group` query heads stacked, as attention stacks them):

        cached slot j: attended iff slots[j] < first          own key i by query row r: attended iff i <= r % steps

    The own mask is made in integers: at a run-time count of steps nothing of it enters XNNPACK
    before the layers do (a partition of its own, and the stacking between, would split them).
    """
    rows = torch.arange(group * steps) % steps
    own = (torch.arange(steps)[None] - rows[:, None]).clamp(0, 1).to(torch.float32) * MASKED
    return (slots - first + 1).clamp(0, 1)[None] * MASKED, own


def block_sizes(capacity: int, block: int) -> list[int]:
    """The cache's positions in blocks of `block` (the last one shorter when `block` does not divide)."""
    return [min(block, capacity - start) for start in range(0, capacity, block)]


def block_starts(sizes: list[int]) -> list[int]:
    """The first position of each block."""
    return [sum(sizes[:number]) for number in range(len(sizes))]


# The position a block's spill slot holds for the masks: past any other, so never attended.
SPILL = float(2**24)
# A call's padding: a position past every block, written to the spill slots.
PAD = 2**24


def split_linear(linear: nn.Linear, widths: list[int]) -> nn.ModuleList:
    """`linear` (no bias) as one linear per consecutive block of `widths` outputs, over its weight's rows."""
    parts, start = nn.ModuleList(), 0
    for width in widths:
        part = nn.Linear(linear.in_features, width, bias=False)
        part.weight = nn.Parameter(linear.weight[start : start + width].detach(), requires_grad=False)
        parts.append(part)
        start += width
    return parts


class CachedAttention(nn.Module):
    """pocket-tts's StreamingMultiheadAttention over a KV cache of `capacity` positions, kept in blocks
    of `block` positions.

    State, per block b: `keys_b` [H_kv, D, size + 1] (transposed: scores are q @ keys) and `values_b`
    [H_kv, size + 1, D]; the last slot is the block's spill slot, never attended, where a prompt
    writes the tokens that fall in other blocks (index_copy_ writes every token somewhere). A call
    reads the first `call["blocks"]` blocks, a product per block: blocks past its position hold
    nothing it attends to. Grouped-query attention reads each key/value head once: the g query heads
    that share it are stacked as rows of one product. The fused query/key/value projection runs as
    three linears, so that no slice of a run-time token count splits the queries from the keys.
    """

    def __init__(self, attention: nn.Module, capacity: int, block: int):
        super().__init__()
        self.attention = attention
        kv_width = attention.num_kv_heads * attention.dim_per_head
        self.projections = split_linear(attention.in_proj, [attention.attn_dim, kv_width, kv_width])
        attention.in_proj = None  # read as the three above
        self.sizes = block_sizes(capacity, block)
        heads, width = attention.num_kv_heads, attention.dim_per_head
        for number, size in enumerate(self.sizes):
            self.register_buffer(f"keys_{number}", torch.zeros(heads, width, size + 1))
            self.register_buffer(f"values_{number}", torch.zeros(heads, size + 1, width))

    def blocks(self, kind: str, count: int | None = None) -> list[torch.Tensor]:
        """The first `count` blocks (default: all) of the keys or the values."""
        return [self.get_buffer(f"{kind}_{number}") for number in range(len(self.sizes) if count is None else count)]

    def forward(self, query: torch.Tensor, call: dict, attn_mask=None) -> torch.Tensor:
        a = self.attention
        t = query.shape[1]
        d, kv_heads = a.dim_per_head, a.num_kv_heads
        group = a.num_heads // kv_heads
        heads = (a.num_heads, kv_heads, kv_heads)
        q, k, v = (project(query).view(1, t, h, d) for project, h in zip(self.projections, heads))
        q, k = a.rope(q, k, offset=call["first"])
        q = q.reshape(t, kv_heads, group, d).permute(1, 2, 0, 3).reshape(kv_heads, group * t, d) * d**-0.5
        new_keys = k.reshape(t, kv_heads, d).permute(1, 2, 0)  # [H_kv, D, T]
        new_values = v.reshape(t, kv_heads, d).permute(1, 0, 2)  # [H_kv, T, D]
        keys, values = self.blocks("keys", call["blocks"]), self.blocks("values", call["blocks"])
        cached_mask, own_mask = call["masks"]
        cached = [torch.bmm(q, block) for block in keys]
        cached = (torch.cat(cached, dim=-1) if len(cached) > 1 else cached[0]) + cached_mask
        scores = torch.cat([cached, torch.bmm(q, new_keys) + own_mask], dim=-1)
        weights = torch.softmax(scores, dim=-1)
        if isinstance(t, torch.SymInt):  # XNNPACK slices no tensor of a run-time size: one product
            x = torch.bmm(weights, torch.cat([*values, new_values], dim=1))
        else:
            weights = weights.split([block.shape[-1] for block in keys] + [t], dim=-1)
            x = functools.reduce(torch.add, [torch.bmm(w, block) for w, block in zip(weights, [*values, new_values])])
        self.write(new_keys, new_values, call["writes"])
        x = x.view(kv_heads, group, t, d).permute(2, 0, 1, 3).reshape(1, t, a.num_heads * d)
        return a.out_proj(x)

    def write(self, keys: torch.Tensor, values: torch.Tensor, writes: dict) -> None:
        """keys [H_kv, D, T] and values [H_kv, T, D] into the slots `writes` names per block."""
        for number, places in writes.items():
            self.get_buffer(f"keys_{number}").index_copy_(2, places, keys)
            self.get_buffer(f"values_{number}").index_copy_(1, places, values)

    def read(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values [T, H_kv, D] at `slots`, numbered over the blocks laid end to end."""
        keys = torch.cat(self.blocks("keys"), dim=-1).index_select(2, slots)
        values = torch.cat(self.blocks("values"), dim=1).index_select(1, slots)
        return keys.permute(2, 0, 1), values.permute(1, 0, 2)


def with_cache(flow_lm: nn.Module, capacity: int, block: int = CACHE_BLOCK) -> nn.Module:
    """A copy of pocket-tts's FlowLMModel whose attention layers keep a cache of `capacity` positions
    in blocks of `block`."""
    from pocket_tts.modules.attention import StreamingMultiheadAttention

    flow_lm = _without_tokenizer_copy(flow_lm)
    for layer in flow_lm.transformer.layers:
        if not isinstance(layer.self_attn, StreamingMultiheadAttention):
            raise PhaseconvError(f"unexpected attention {type(layer.self_attn).__name__} in the flow LM")
        layer.self_attn = CachedAttention(layer.self_attn, capacity, block)
    return flow_lm.eval()


def _without_tokenizer_copy(flow_lm: nn.Module) -> nn.Module:
    """A copy of the module over its parameters; the tokenizer (a C++ object that does not copy) is shared."""
    tokenizer = flow_lm.conditioner.tokenizer
    flow_lm.conditioner.tokenizer = None
    try:
        copied = copy_sharing_parameters(flow_lm)
    finally:
        flow_lm.conditioner.tokenizer = tokenizer
    copied.conditioner.tokenizer = tokenizer
    return copied


# The language model's linear layers quantized as ExecuTorch's LLM export does (`--qlinear`): int8
# activations quantized at run time and int4 or int8 weights, which XNNPACK runs as such.
LINEAR_QUANTIZATION = {"8da4w": torch.int4, "8da8w": torch.int8}
# 4-bit weights in groups of the first size that divides a layer's inputs: larger groups make a faster
# prompt, 32 keeps the small configs' layers grouped
GROUP_SIZES = (128, 32)


def group_size(linear: nn.Linear) -> int | None:
    """The group of a 4-bit linear layer's weights: the first of GROUP_SIZES that divides its inputs,
    None (per output channel) where none does."""
    return next((size for size in GROUP_SIZES if linear.in_features % size == 0), None)


def quantize_linears(flow_lm: nn.Module, scheme: str) -> None:
    """Every linear layer of the transformer and the flow head in `scheme` (8da4w or 8da8w): 4-bit
    weights in groups of input channels (group_size), 8-bit weights per output channel (XNNPACK
    groups 4-bit weights only). The EOS logit and the input projection stay float32: one row, and
    32 inputs."""
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

    if scheme not in LINEAR_QUANTIZATION:
        raise PhaseconvError(f"unknown quantization {scheme!r}; known: {', '.join(LINEAR_QUANTIZATION)}")
    per_group = LINEAR_QUANTIZATION[scheme] == torch.int4
    for size in (*GROUP_SIZES, None) if per_group else (None,):
        config = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=LINEAR_QUANTIZATION[scheme],
            weight_granularity=PerGroup(size) if size else PerAxis(0),
            intx_choose_qparams_algorithm="hqq_scale_only",
        )

        def chosen(module, name, size=size):
            return (
                isinstance(module, nn.Linear)
                and name.startswith(("transformer.", "flow_net."))
                and (not per_group or group_size(module) == size)
            )

        quantize_(flow_lm, config, filter_fn=chosen)


def block_writes(positions: torch.Tensor, sizes: list[int], blocks: int, first_block: int = 0) -> dict:
    """{block: slots} for blocks `first_block` .. `blocks` - 1: a position's own slot in the block
    that holds it, the block's spill slot in the others (a PAD position spills everywhere)."""
    writes = {}
    for number, (start, size) in enumerate(zip(block_starts(sizes)[:blocks], sizes[:blocks])):
        if number >= first_block:
            places = positions - start
            writes[number] = torch.where((places >= 0) & (places < size), places, size)
    return writes


def _call(positions: torch.Tensor, steps: int, layer: CachedAttention, blocks: int, first_block: int = 0) -> dict:
    """What every layer (as `layer`) reads for a call: the first position (RoPE's offset), the first
    `blocks` cache blocks and the mask over them, and where in blocks `first_block` .. `blocks` - 1
    the call's keys and values go."""
    sizes, group = layer.sizes, layer.attention.num_heads // layer.attention.num_kv_heads
    first = positions[:1].to(torch.float32)
    read = zip(block_starts(sizes)[:blocks], sizes[:blocks])
    slots = torch.tensor([p for start, size in read for p in [*range(start, start + size), SPILL]], dtype=torch.float32)
    writes = block_writes(positions, sizes, blocks, first_block)
    masks = attention_masks(first, steps, slots, group)
    return {"first": first, "blocks": blocks, "masks": masks, "writes": writes}


def cache_blocks(flow_lm: nn.Module) -> list[int]:
    """The sizes of the blocks that hold the cache's positions."""
    return flow_lm.transformer.layers[0].self_attn.sizes


def capacity_of(flow_lm: nn.Module) -> int:
    return sum(cache_blocks(flow_lm))


class Prompt(nn.Module):
    """Conditioning tokens (text embeddings or a voice's projected latents) through the transformer:
    their keys and values written at `positions`, which lie in cache blocks 0 .. `block` (default:
    the last); returns the last token's normalized hidden state (every token normalized, then the
    last taken: XNNPACK takes no row of a run-time count, so that is the program's last operator)."""

    def __init__(self, flow_lm: nn.Module, block: int | None = None):
        super().__init__()
        self.transformer, self.out_norm = flow_lm.transformer, flow_lm.out_norm
        self.blocks = len(cache_blocks(flow_lm)) if block is None else block + 1

    def forward(self, embeddings: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        call = _call(positions, embeddings.shape[1], self.transformer.layers[0].self_attn, self.blocks)
        return self.out_norm(self.transformer(embeddings, call))[:, -1]


class Generate(nn.Module):
    """One frame of `FlowLMModel.forward` in generation: the previous latent (the learned BOS when
    `start` is 1) in, the next latent and the end-of-speech logit out; `noise` [1, ldim] is the flow's
    starting point (zeros at temperature 0), drawn by the caller as pocket-tts draws it.
    `block`: the last cache block read; the frame's position falls in one of blocks `first_block` ..
    `block`, the only ones written (a write per block and layer: the frame ladder's earlier steps
    hold the positions before)."""

    def __init__(self, flow_lm: nn.Module, block: int, decode_steps: int = 1, first_block: int = 0):
        super().__init__()
        self.block, self.first_block = block, first_block
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
        call = _call(positions, 1, self.transformer.layers[0].self_attn, self.block + 1, self.first_block)
        return self.frame(self.transformer(self.input_linear(sequence), call), noise)

    def frame(self, hidden: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The transformer's output for the frame [1, 1, D] to (latent [1, 1, ldim], eos_logit [1, 1])."""
        hidden = self.out_norm(hidden)
        if self.z_proj is not None:
            hidden = self.z_proj(hidden)
        hidden = hidden[:, -1]
        eos_logit = self.out_eos(hidden)
        return self.sample(functools.partial(self.flow_net, hidden), noise)[:, None], eos_logit


class FirstFrame(Generate):
    """A chunk's last text tokens and its first frame in one call: the text embeddings [1, T, D] and
    the BOS frame after them through the transformer at `positions` [T + 1] (in cache blocks
    0 .. `block`), then the frame's latent and EOS logit as Generate gives them. The frame is one
    more row of the prompt's matrix products, where a call of its own reads every weight again.

        frame's hidden = onehot(T) @ hidden[T + 1 rows]       (exact: the other rows times 0)

    The product takes the last row: XNNPACK takes no row of a run-time count.
    """

    def forward(
        self, embeddings: torch.Tensor, positions: torch.Tensor, noise: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.input_linear(self.bos_emb).view(1, 1, -1)
        sequence = torch.cat([embeddings, start], dim=1)
        steps = sequence.shape[1]
        call = _call(positions, steps, self.transformer.layers[0].self_attn, self.block + 1)
        last = (torch.arange(steps) == steps - 1).to(torch.float32).view(1, 1, steps)
        return self.frame(torch.bmm(last, self.transformer(sequence, call)), noise)


def attention_layers(flow_lm: nn.Module) -> list[CachedAttention]:
    return [layer.self_attn for layer in flow_lm.transformer.layers]


class LoadVoice(nn.Module):
    """A voice state into the cache: state [L, 2, T, H_kv, D] (per layer, keys then values, as
    pocket-tts's `cache` holds them) at `positions` [T] (PAD: not written)."""

    def __init__(self, flow_lm: nn.Module):
        super().__init__()
        self.transformer = flow_lm.transformer

    def forward(self, state: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        layers = attention_layers(self)
        writes = block_writes(positions, layers[0].sizes, len(layers[0].sizes))
        for number, attention in enumerate(layers):
            attention.write(state[number, 0].permute(1, 2, 0), state[number, 1].permute(1, 0, 2), writes)
        return torch.zeros(1)


class ReadVoice(nn.Module):
    """The cache at `positions` [T] as a voice state [L, 2, T, H_kv, D] (LoadVoice's input). It writes
    zeros to the spill slots too: a method that only reads a buffer has it taken for a constant by
    XNNPACK's partitioner, which reads the value the buffer had when exported."""

    def __init__(self, flow_lm: nn.Module):
        super().__init__()
        self.transformer = flow_lm.transformer

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        layers = attention_layers(self)
        slots = positions + torch.div(positions, layers[0].sizes[0], rounding_mode="floor")  # a spill slot per block
        state = torch.stack([torch.stack(attention.read(slots)) for attention in layers])
        spill = {number: torch.tensor([size]) for number, size in enumerate(layers[0].sizes)}
        heads, width = state.shape[3], state.shape[4]
        for attention in layers:
            attention.write(torch.zeros(heads, width, 1), torch.zeros(heads, 1, width), spill)
        return state


class ClearCache(nn.Module):
    """Every slot of the cache to zero. A slot past a call's first position is masked, but enters
    the products with weight 0, and 0 * NaN is NaN: a cache must hold numbers before its first use
    (a loader that leaves out the method holding the buffers' initial values starts them from
    uninitialized memory). Each block is written in place from one block of zeros (`index_put_`
    over its first dimension, which ExecuTorch runs in place): the method's memory is a block's,
    not the cache's."""

    def __init__(self, flow_lm: nn.Module):
        super().__init__()
        self.transformer = flow_lm.transformer

    def forward(self) -> torch.Tensor:
        zeros = {}
        for layer in self.transformer.layers:
            for cache in layer.self_attn.blocks("keys") + layer.self_attn.blocks("values"):
                if cache.shape not in zeros:
                    zeros[cache.shape] = torch.zeros_like(cache)
                torch.ops.aten.index_put_(cache, (torch.arange(cache.shape[0]),), zeros[cache.shape])
        return torch.zeros(1)


def draw_noise(generator: torch.Generator, dim: int, temperature: float, clamp: float | None) -> torch.Tensor:
    """One draw of the flow's starting point [1, dim], as FlowLMModel.forward draws it: normal with std
    sqrt(temperature), truncated to [-clamp, clamp] when the config has a `noise_clamp`."""
    noise, std = torch.empty(1, dim), temperature**0.5
    if clamp is None:
        return noise.normal_(0.0, std, generator=generator)
    return torch.nn.init.trunc_normal_(noise, 0.0, std, -clamp, clamp, generator=generator)
