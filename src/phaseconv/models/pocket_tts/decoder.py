"""pocket-tts's Mimi decoder as a streaming step: one latent frame in, one frame of audio out.

pocket-tts (Kyutai's CPU text-to-speech) decodes while its language model generates:
`mimi.decode_from_latent(latent, mimi_state)` per 80 ms latent frame, then
`increment_steps(mimi, mimi_state, increment=16)`. Its convolutions keep their state in tensors
written in place (a conv's last k - s inputs, a transposed conv's held-back partial output); its
attention appends to a cache that grows with the utterance and reads its length with `.item()`.

`MimiStep` runs pocket-tts's own decoding code with that state in buffers of the step module, so
`torch.export` turns every write into a mutated buffer and a runtime just calls `forward` again and
again. Only the attention is replaced, by `SlidingWindowAttention`: the same projections, RoPE and
mask rule (a query at position p sees keys at p - context < position <= p), over a cache of the
last context - 1 keys of fixed size.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from phaseconv.errors import PhaseconvError
from phaseconv.models.pocket_tts.hub import DEFAULT_LANGUAGE, _pocket_tts, config_names, config_path
from phaseconv.models.sharing import copy_sharing_parameters

DEFAULT_CONFIG = DEFAULT_LANGUAGE


def build_mimi(config: str = DEFAULT_CONFIG, weights: str | Path | None = None, seed: int = 0) -> nn.Module:
    """pocket-tts's MimiModel for a shipped config: random weights (seeded), or those of `weights`
    (a .safetensors file that pocket-tts's get_mimi_state_dict reads)."""
    _pocket_tts()
    from pocket_tts.models.mimi import build_mimi as build
    from pocket_tts.utils.config import load_config

    path = config_path(config)
    torch.manual_seed(seed)
    mimi = build(load_config(path).mimi).eval()
    if weights is not None:
        load_weights(mimi, Path(weights), config)
    return mimi


def load_weights(mimi: nn.Module, path: Path, config: str) -> None:
    from pocket_tts.utils.weights_loading import get_mimi_state_dict

    if not path.is_file():
        raise PhaseconvError(f"no such weights file: {path}")
    try:
        state = get_mimi_state_dict(path)
    except Exception as error:
        raise PhaseconvError(f"cannot read {path} as safetensors: {type(error).__name__}: {error}") from None
    check_state(mimi.state_dict(), state, path, config)
    mimi.load_state_dict(state, strict=True)


def check_state(expected: dict, state: dict, path: Path, config: str) -> None:
    """`state` has exactly the keys and shapes of `expected`, or an error naming what differs."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    if missing or unexpected or wrong:
        problems = [f"{len(missing)} missing (e.g. {missing[0]})"] if missing else []
        problems += [f"{len(unexpected)} unexpected (e.g. {unexpected[0]})"] if unexpected else []
        if wrong:
            name = wrong[0]
            problems.append(
                f"{len(wrong)} of another shape (e.g. {name}: {list(state[name].shape)} in the file, "
                f"{list(expected[name].shape)} in the config)"
            )
        raise PhaseconvError(f"the weights in {path} do not fit pocket-tts config {config}: {'; '.join(problems)}")


def steps_per_frame(mimi: nn.Module) -> int:
    return int(mimi.encoder_frame_rate / mimi.frame_rate)


def window_masks(steps: int, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive masks (0 attend, -inf not) of the `steps` queries at positions p .. p + steps - 1
    over the cached keys at p - (context - 1) .. p - 1 and over the frame's own keys:

        attend(query q, key k) = 0 <= q - k < context      (pocket-tts's _build_attention_mask)
    """
    cached = context - 1
    queries = torch.arange(steps)[:, None] + cached
    keys = torch.arange(cached + steps)[None, :]
    delta = queries - keys
    mask = torch.zeros(delta.shape).masked_fill(~((delta >= 0) & (delta < context)), float("-inf"))
    return mask[:, :cached].contiguous(), mask[:, cached:].contiguous()


class SlidingWindowAttention(nn.Module):
    """pocket-tts's StreamingMultiheadAttention for a fixed number of steps per call, over a key/value
    cache of the last context - 1 steps (the older ones are masked out by the context anyway).

    State: `keys` [B, H, D, context - 1] (transposed: scores are q @ keys), `values`
    [B, H, context - 1, D]; `key_bias` [context - 1], 0 where a cached slot holds a real step and
    -inf before the utterance's start; `position`, the first step's position (float32: exact to
    2^24 steps, 23 hours at 200 Hz), which RoPE reads. Head-major, so attention reads the cache
    without re-laying it out.
    """

    STATE = ("keys", "values", "key_bias", "position")  # the buffers forward writes

    def __init__(self, attention: nn.Module, steps: int, batch_size: int = 1):
        super().__init__()
        if attention.num_kv_heads != attention.num_heads:
            raise PhaseconvError("grouped-query attention in the Mimi decoder is not supported by the step")
        if attention.context is None:
            raise PhaseconvError("the Mimi decoder's attention has no context window: its cache would grow")
        self.attention = attention
        self.steps = steps
        cached = attention.context - 1
        heads, width = attention.num_heads, attention.dim_per_head
        self.register_buffer("keys", torch.zeros(batch_size, heads, width, cached))
        self.register_buffer("values", torch.zeros(batch_size, heads, cached, width))
        self.register_buffer("key_bias", torch.full((cached,), float("-inf")))
        self.register_buffer("position", torch.zeros(1))
        cached_mask, own_mask = window_masks(steps, attention.context)
        self.register_buffer("cached_mask", cached_mask, persistent=False)
        self.register_buffer("own_mask", own_mask, persistent=False)
        self.register_buffer("new_keys_bias", torch.zeros(steps), persistent=False)

    def forward(self, query: torch.Tensor, model_state=None, attn_mask=None) -> torch.Tensor:
        a = self.attention
        projected = a.in_proj(query)
        b, t, _ = projected.shape
        d = a.dim_per_head
        q = projected[..., : a.attn_dim].view(b, t, a.num_heads, d)
        kv = projected[..., a.attn_dim :].view(b, t, 2, a.num_kv_heads, d)
        k, v = torch.unbind(kv, dim=2)
        q, k = a.rope(q, k, offset=self.position)
        keys = torch.cat([self.keys, k.permute(0, 2, 3, 1)], dim=-1)
        values = torch.cat([self.values, v.transpose(1, 2)], dim=2)
        # The mask's cached part follows the utterance: slots before its start stay masked.
        mask = torch.cat([self.cached_mask + self.key_bias, self.own_mask], dim=-1)
        x = F.scaled_dot_product_attention(q.transpose(1, 2), keys.transpose(-1, -2), values, mask)
        cached = self.values.shape[2]
        self.keys.copy_(keys[..., -cached:])
        self.values.copy_(values[:, :, -cached:])
        self.key_bias.copy_(torch.cat([self.key_bias, self.new_keys_bias])[-cached:])
        self.position.add_(float(t))  # a float: an int would be cast outside the delegate
        x = x.transpose(1, 2).reshape(b, t, a.num_heads * d)
        return a.out_proj(x)


def _encoding(name: str) -> bool:
    """Is a module of Mimi's (by name) on the encoding side."""
    return name.startswith(("encoder", "downsample"))


class StreamingStep(nn.Module):
    """Part of pocket-tts's Mimi run on a fixed number of steps per call, its streaming state in buffers:
    every convolution's tail (and, with replicate padding, its `first` flag) and every attention's
    window of keys and values (SlidingWindowAttention). `include` picks the modules by name."""

    def __init__(self, mimi: nn.Module, include, steps: int, batch_size: int = 1):
        super().__init__()
        from pocket_tts.modules.attention import StreamingMultiheadAttention
        from pocket_tts.modules.conv import StreamingConv1d, StreamingConvTranspose1d

        self.mimi = copy_sharing_parameters(mimi).eval()
        self._state_slots: dict[str, dict[str, str]] = {}
        for name, module in list(self.mimi.named_modules()):
            if not include(name):
                continue
            if isinstance(module, StreamingMultiheadAttention):
                parent_name, _, child = name.rpartition(".")
                setattr(self.mimi.get_submodule(parent_name), child, SlidingWindowAttention(module, steps, batch_size))
            elif isinstance(module, (StreamingConv1d, StreamingConvTranspose1d)):
                module._module_absolute_name = name
                slots = {}
                for key, value in module.init_state(batch_size, 0).items():
                    if key == "first" and module.pad_mode != "replicate":  # read only with replicate padding
                        continue
                    buffer = f"state_{len(self._state_slots)}_{key}"
                    self.register_buffer(buffer, value.clone())
                    slots[key] = buffer
                self._state_slots[name] = slots

    def state(self) -> dict[str, dict[str, torch.Tensor]]:
        """pocket-tts's model_state, its tensors the buffers."""
        return {
            name: {key: getattr(self, buffer) for key, buffer in slots.items()}
            for name, slots in self._state_slots.items()
        }

    def first_done(self) -> None:
        """After a call: the replicate paddings' `first` flags off (pocket-tts replaces the flag in its
        state dict instead of writing it, which a buffer would not see)."""
        for slots in self._state_slots.values():
            if "first" in slots:
                flag = getattr(self, slots["first"])
                flag.copy_(torch.zeros_like(flag))

    def state_names(self) -> list[str]:
        """The buffers forward writes: every convolution's state and every attention's cache."""
        names = [buffer for slots in self._state_slots.values() for buffer in slots.values()]
        for name, module in self.named_modules():
            if isinstance(module, SlidingWindowAttention):
                names += [f"{name}.{buffer}" for buffer in SlidingWindowAttention.STATE]
        return names


class MimiStep(StreamingStep):
    """latent [B, frames, D] (as `decode_from_latent` takes it) -> pcm [B, 1, frames * frame_size],
    state in buffers: those of the step for one frame, so steps for several frame counts share them."""

    def __init__(self, mimi: nn.Module, batch_size: int = 1, frames: int = 1):
        super().__init__(mimi, lambda name: not _encoding(name), frames * steps_per_frame(mimi), batch_size)
        self.latent_dim = self.mimi.quantizer.dimension
        self.frame_size = self.mimi.frame_size
        self.frames = frames

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.mimi.decode_from_latent(latent, self.state())

    def output_block(self) -> str:
        """The decoder's last residual block, at the output rate: in int8 it costs the step the
        most SNR of any part (benchmarks/int8_sensitivity.py), so `keep_float` candidate one."""
        from pocket_tts.modules.seanet import SEANetResnetBlock

        blocks = [name for name, m in self.mimi.decoder.named_modules() if isinstance(m, SEANetResnetBlock)]
        return f"mimi.decoder.{blocks[-1]}"


class EncoderStep(StreamingStep):
    """audio [B, 1, frames * frame_size] -> latents [B, frames, D] per call, state in buffers:
    `encode_to_latent` streamed. The encoder is causal (convolutions padded on the left, attention over
    the past), so the latents of audio fed a few frames at a time are those of the whole audio at once."""

    def __init__(self, mimi: nn.Module, frames: int, batch_size: int = 1):
        super().__init__(mimi, _encoding, frames * steps_per_frame(mimi), batch_size)
        self.frames, self.frame_size = frames, self.mimi.frame_size

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        mimi, state = self.mimi, self.state()
        (embedding,) = mimi.encoder_transformer(mimi.encoder(audio, state), state)
        if getattr(mimi, "downsample", None) is not None:
            embedding = mimi.downsample(embedding, state)
        self.first_done()
        return embedding.transpose(-1, -2)


def mimi_step(config: str = DEFAULT_CONFIG, weights: str | Path | None = None, frames: int = 1):
    """Factory: (MimiStep, (latents [1, frames, D],)) for a shipped pocket-tts config."""
    step = MimiStep(build_mimi(config, weights), frames=frames)
    return step, (torch.randn(1, frames, step.latent_dim, generator=torch.Generator().manual_seed(0)),)


@torch.no_grad()
def stream_eager(mimi: nn.Module, latents: torch.Tensor):
    """pocket-tts's own streaming decode, frame by frame, as its TTS worker runs it: yields each frame's
    audio [B, 1, frame_size] for latents [B, frames, D]."""
    from pocket_tts.modules.stateful_module import StatefulModule, increment_steps, init_states

    for name, module in mimi.named_modules():
        if isinstance(module, StatefulModule):
            module._module_absolute_name = name
    steps = steps_per_frame(mimi)
    state = init_states(mimi, batch_size=latents.shape[0], sequence_length=latents.shape[1] * steps)
    for frame in range(latents.shape[1]):
        yield mimi.decode_from_latent(latents[:, frame : frame + 1], state)
        increment_steps(mimi, state, increment=steps)


def peak_scaled_pcm_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| in 16-bit PCM steps of the waveform scaled to peak 1."""
    return float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30) * 32767)


__all__ = [
    "DEFAULT_CONFIG",
    "EncoderStep",
    "MimiStep",
    "SlidingWindowAttention",
    "build_mimi",
    "check_state",
    "config_names",
    "mimi_step",
    "peak_scaled_pcm_error",
    "stream_eager",
    "window_masks",
]
