"""pocket-tts as sherpa-onnx runs it: the five ONNX files of its pocket model
(`OfflineTtsPocketModelConfig`) and its tokenizer's two JSON files, exported from pocket-tts's own
modules, so that sherpa-onnx speaks the same weights phaseconv lowers.

sherpa-onnx's files come from an exporter (the pocket-tts-onnx-export repository its CI runs) that
patches a January 2026 copy of pocket-tts and traces it with torch.onnx's TorchScript exporter. This
is that logic ported to the pocket-tts installed: the same graphs, inputs and outputs in the same
order (sherpa-onnx feeds them by position), the same fixed 1000-position states:

    text_conditioner: token_ids [1, T] int64 -> embeddings [1, T, D]
    encoder:  audio [1, 1, N] -> voice conditioning [1, F, D] (Mimi's encoder, speaker_proj, and the
              learned start before a voice where the config has one, as get_state_for_audio_prompt)
    lm_main:  sequence [1, S, ldim] (NaN marks the start), text_embeddings [1, T, D], state...
              -> conditioning [1, D], eos_logit [1, 1], state...
    lm_flow:  c [1, D], s [1, 1], t [1, 1], x [1, ldim] -> flow direction [1, ldim]
    decoder:  latent [1, n, ldim], state... -> audio [1, 1, n * frame_size], state...

sherpa-onnx starts every state at zeros, so each state here is one whose zeros are pocket-tts's
start: attention caches with an offset (positions written so far) and the written prefix read
through a slice, convolutions' previous inputs and transposed convolutions' partial outputs.
pocket-tts's in-place state updates are made out of place for the trace, its offsets tensors.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from unittest import mock

import torch
from torch import nn
from torch.nn import functional as F

from phaseconv.errors import PhaseconvError

POSITIONS = 1000  # the states' positions, as sherpa-onnx's files have them
FILES = {
    "lm_main": "lm_main.onnx",
    "lm_flow": "lm_flow.onnx",
    "encoder": "encoder.onnx",
    "decoder": "decoder.onnx",
    "text_conditioner": "text_conditioner.onnx",
    "vocab_json": "vocab.json",
    "token_scores_json": "token_scores.json",
}
OPSET = 17
SHERPA_TEXT_WIDTH = 1024  # sherpa-onnx shapes its empty text input [1, 0, 1024]
DECODER_CHUNK = 15  # latent frames sherpa-onnx decodes a call (at most)


def _length(x: torch.Tensor, dim: int) -> torch.Tensor:
    """A size as a tensor, so that the trace keeps it dynamic."""
    return torch._shape_as_tensor(x)[dim]


def _init_state(self, batch_size: int, sequence_length: int) -> dict[str, torch.Tensor]:
    positions = getattr(self, "ring", None) or sequence_length
    return {
        "offset": torch.zeros(batch_size, dtype=torch.long),
        "cache": torch.zeros(2, batch_size, positions, self.num_heads, self.dim_per_head),
    }


def _append_and_get(stateless, self, k: torch.Tensor, v: torch.Tensor, state: dict | None):
    """pocket-tts's linear KV cache, written out of place at the offset, its written prefix read; for
    an attention of limited context (`ring`, Mimi's), a ring of the cache's positions, each slot
    read with the position it holds (negative: none yet), which pocket-tts's mask then limits to the
    context. `stateless`: pocket-tts's own, for a call without state."""
    if state is None:
        return stateless(self, k, v, state)
    start, count, batch = state["offset"][0], _length(k, 1), k.shape[0]
    if getattr(self, "ring", None):
        capacity = state["cache"].shape[2]
        slots = torch.remainder(start + torch.arange(count), capacity)
        index = slots.view(1, 1, -1, 1, 1).expand(2, batch, -1, k.shape[2], k.shape[3])
        cache = state["cache"].scatter(2, index, torch.stack([k, v]))
        last = start + count - 1
        positions = last - torch.remainder(last - torch.arange(capacity), capacity)
    else:
        cache = state["cache"].clone()
        cache[0, :, start : start + count] = k
        cache[1, :, start : start + count] = v
        positions = torch.arange(start + count)
    state["cache"] = cache
    valid = cache[:, :, : _length(positions, 0)]
    positions = positions.view(1, -1).expand(batch, -1)
    return valid[0].permute(0, 2, 1, 3), valid[1].permute(0, 2, 1, 3), positions, state["offset"]


def _increment_step(self, state: dict[str, torch.Tensor], increment):
    state["offset"] = state["offset"] + increment


def _causal_mask(t, context, device):
    from pocket_tts.modules.attention import _build_attention_mask

    positions = torch.arange(t, device=device).view(1, -1)
    return _build_attention_mask(positions, positions, context)


def _rms_norm(x: torch.Tensor, alpha: torch.Tensor, eps: float) -> torch.Tensor:
    """pocket-tts's RMS norm in float32 without its cast of alpha to the variance's type, which the
    TorchScript exporter drops from the graph (ONNX Runtime then refuses the file)."""
    return x * (alpha * torch.rsqrt(eps + x.var(dim=-1, keepdim=True)))


def _whole_frames(x: torch.Tensor, frame_size: int, stride: int) -> torch.Tensor:
    """Mimi's pad_for_conv1d on audio the Encoder has already padded to whole frames (its Python
    arithmetic on the length would be traced as a constant)."""
    return x


def _conv_forward(stateless, self, x: torch.Tensor, model_state) -> torch.Tensor:
    """StreamingConv1d with its previous inputs replaced, not written into (`stateless`: pocket-tts's
    own, for a call without state)."""
    if model_state is None:
        return stateless(self, x, model_state)
    state = self.get_state(model_state)
    if self.pad_mode == "replicate":
        raise PhaseconvError("sherpa-onnx's zero states cannot start a replicate-padded convolution")
    kept = state["previous"].shape[-1]
    if kept:
        x = torch.cat([state["previous"], x], dim=-1)
        state["previous"] = x[..., -kept:]
    return self.conv(x)


def _transposed_forward(self, x: torch.Tensor, mimi_state) -> torch.Tensor:
    """StreamingConvTranspose1d with its partial output replaced, not written into."""
    state = self.get_state(mimi_state)
    y = self.convtr(x)
    kept = state["partial"].shape[-1]
    if kept:
        y = torch.cat([y[..., :kept] + state["partial"], y[..., kept:]], dim=-1)
        tail = y[..., -kept:]
        state["partial"] = tail - self.convtr.bias[:, None] if self.convtr.bias is not None else tail
        y = y[..., :-kept]
    return y


@contextlib.contextmanager
def traceable():
    """pocket-tts's streaming modules as the trace needs them (restored after)."""
    from pocket_tts.models import mimi
    from pocket_tts.modules import attention, mlp, transformer
    from pocket_tts.modules.conv import StreamingConv1d, StreamingConvTranspose1d

    backend = attention._LinearKVCacheBackend
    stateless, stateless_conv = backend.append_and_get, StreamingConv1d.forward
    with contextlib.ExitStack() as stack:
        for target, name, value in [
            (backend, "init_state", lambda self, b, s, device, dtype: _init_state(self, b, s)),
            (backend, "append_and_get", lambda self, k, v, state: _append_and_get(stateless, self, k, v, state)),
            (backend, "increment_step", _increment_step),
            (attention, "_cached_causal_mask", _causal_mask),
            (transformer, "_cached_causal_mask", _causal_mask),
            (mlp, "_rms_norm", _rms_norm),
            (mimi, "pad_for_conv1d", _whole_frames),
            (StreamingConv1d, "forward", lambda self, x, state: _conv_forward(stateless_conv, self, x, state)),
            (StreamingConvTranspose1d, "forward", _transposed_forward),
        ]:
            stack.enter_context(mock.patch.object(target, name, value))
        yield


class FlatState:
    """A model's streaming state (pocket-tts's {module: {name: tensor}}) as a flat list, in a fixed
    order: module names, then tensor names, sorted."""

    def __init__(self, module: nn.Module, prefixes: tuple[str, ...] = ("",)):
        from pocket_tts.modules.stateful_module import init_states

        states = init_states(module, batch_size=1, sequence_length=POSITIONS)
        self.keys = [(m, k) for m in sorted(states) if m.startswith(prefixes) for k in sorted(states[m])]
        self.initial = [states[m][k] for m, k in self.keys]

    def unflatten(self, tensors) -> dict:
        state: dict = {}
        for (module, key), tensor in zip(self.keys, tensors):
            state.setdefault(module, {})[key] = tensor
        return state

    def flatten(self, state: dict) -> list[torch.Tensor]:
        return [state[m][k] for m, k in self.keys]

    def advance(self, module: nn.Module, state: dict, increment: torch.Tensor) -> None:
        """pocket-tts's increment_steps, over the modules this state holds."""
        for name, child in module.named_modules():
            if name in state:
                child.increment_step(state[name], increment)


class TextConditioner(nn.Module):
    def __init__(self, tts):
        super().__init__()
        self.conditioner = tts.flow_lm.conditioner

    def forward(self, token_ids):
        return self.conditioner(token_ids)


class Encoder(nn.Module):
    """Audio at 24 kHz [1, 1, N] -> the voice's conditioning, as get_state_for_audio_prompt makes it
    (zeros pad the audio to whole frames, as Mimi's pad_for_conv1d does)."""

    def __init__(self, tts):
        super().__init__()
        self.mimi, self.speaker_proj = tts.mimi, tts.flow_lm.speaker_proj_weight
        self.bos = tts.flow_lm.bos_before_voice if tts.flow_lm.insert_bos_before_voice else None

    def forward(self, audio):
        frame = self.mimi.frame_size
        whole = torch.div(_length(audio, 2) + frame - 1, frame, rounding_mode="floor") * frame
        audio = torch.cat([audio, audio.new_zeros(1, 1, frame)], dim=-1)[..., :whole]
        prompt = F.linear(self.mimi.encode_to_latent(audio).float(), self.speaker_proj)
        return prompt if self.bos is None else torch.cat([self.bos, prompt], dim=1)


class LmMain(nn.Module):
    """The language model's backbone over the cache: a voice, a text or one latent frame in; the last
    position's conditioning and end-of-speech logit out."""

    def __init__(self, tts, state: FlatState):
        super().__init__()
        self.flow_lm, self.state = tts.flow_lm, state

    def forward(self, sequence, text_embeddings, *flat):
        state = self.state.unflatten(flat)
        sequence = torch.where(torch.isnan(sequence), self.flow_lm.bos_emb, sequence)
        hidden = self.flow_lm.backbone(self.flow_lm.input_linear(sequence), text_embeddings, sequence, state)
        conditioning = hidden.float()[:, -1]
        self.state.advance(self.flow_lm, state, _length(sequence, 1) + _length(text_embeddings, 1))
        return conditioning, self.flow_lm.out_eos(conditioning), *self.state.flatten(state)


class LmFlow(nn.Module):
    """The flow head as sherpa-onnx steps it: x += (1 / num_steps) * lm_flow(c, s, t, x), at s = i / num_steps,
    t = s + 1 / num_steps. pocket-tts's LSD head is that step itself; its one-step heads without time
    conditions are it at num_steps=1 ("pointwise": x + head(x); "drifting": head(x)), and its
    flow-matching head takes the time s alone."""

    def __init__(self, tts):
        super().__init__()
        self.flow_net, self.flow_type = tts.flow_lm.flow_net, tts.flow_lm.flow_type
        if self.flow_type not in ("lsd", "pointwise", "drifting", "flow_matching"):
            raise PhaseconvError(f"sherpa-onnx cannot step pocket-tts's {self.flow_type!r} flow head")

    def forward(self, c, s, t, x):
        if self.flow_type == "lsd":
            return self.flow_net(c, s, t, x)
        if self.flow_type == "flow_matching":
            return self.flow_net(c, s, x)
        head = self.flow_net(c, x)
        return head if self.flow_type == "pointwise" else head - x


class Decoder(nn.Module):
    """Latent frames [1, n, ldim] (the language model's, before its normalization is undone) -> audio."""

    def __init__(self, tts, state: FlatState):
        super().__init__()
        self.mimi, self.state = tts.mimi, state
        self.std, self.mean = tts.flow_lm.emb_std, tts.flow_lm.emb_mean
        self.steps_per_latent = int(tts.mimi.encoder_frame_rate / tts.mimi.frame_rate)

    def forward(self, latent, *flat):
        state = self.state.unflatten(flat)
        audio = self.mimi.decode_from_latent(latent * self.std + self.mean, state)
        self.state.advance(self.mimi, state, _length(latent, 1) * self.steps_per_latent)
        return audio, *self.state.flatten(state)


def export(tts: nn.Module, tokenizer: Path, folder: Path, end_of_speech: bool = True) -> dict[str, Path]:
    """sherpa-onnx's files for `tts` (pocket-tts's TTSModel, its tokenizer a sentencepiece `.model`)
    in `folder`; returns them by OfflineTtsPocketModelConfig's field names. `end_of_speech=False`
    makes the end-of-speech logit always false (sherpa-onnx ends at its fixed logit > -4; a
    benchmark then fixes the frame count with its `max_frames`)."""
    import copy

    if tts.flow_lm.dim != SHERPA_TEXT_WIDTH:
        raise PhaseconvError(
            f"sherpa-onnx's pocket runner is written for text embeddings {SHERPA_TEXT_WIDTH} wide (english's); "
            f"this config's are {tts.flow_lm.dim}"
        )
    if tokenizer.suffix != ".model":
        raise PhaseconvError(f"sherpa-onnx reads a sentencepiece tokenizer (.model), not {tokenizer.name}")
    tokenizer_tables(tokenizer, folder)
    tts = copy.deepcopy(tts).eval()
    tts.flow_lm.conditioner.tokenizer = None
    steps = int(tts.mimi.encoder_frame_rate / tts.mimi.frame_rate)  # the decoder's positions per latent frame
    for attention in tts.mimi.modules():
        if getattr(attention, "context", None) is not None and hasattr(attention, "_cache_backend"):
            # a ring holds the context and a call's own positions, not the whole utterance
            attention._cache_backend.ring = attention.context + DECODER_CHUNK * steps
    if not end_of_speech:
        with torch.no_grad():
            tts.flow_lm.out_eos.bias.fill_(-1e9)
    dim, ldim = tts.flow_lm.dim, tts.flow_lm.ldim
    width = dim if tts.flow_lm.z_proj is None else tts.flow_lm.z_proj.out_features  # the flow head's condition
    paths = {name: folder / file for name, file in FILES.items()}
    with traceable(), torch.no_grad():
        lm_state = FlatState(tts.flow_lm)
        decoder_state = FlatState(tts.mimi, ("decoder.", "decoder_transformer.", "upsample."))
        graphs = {
            "text_conditioner": (TextConditioner(tts), (torch.zeros(1, 7, dtype=torch.long),), ["token_ids"]),
            "encoder": (Encoder(tts), (torch.randn(1, 1, 3 * tts.mimi.frame_size + 100),), ["audio"]),
            "lm_main": (
                LmMain(tts, lm_state),
                (torch.randn(1, 1, ldim), torch.randn(1, 3, dim), *lm_state.initial),
                ["sequence", "text_embeddings", *_numbered("state", lm_state)],
            ),
            "lm_flow": (
                LmFlow(tts),
                (torch.randn(1, width), torch.zeros(1, 1), torch.ones(1, 1), torch.randn(1, ldim)),
                ["c", "s", "t", "x"],
            ),
            "decoder": (
                Decoder(tts, decoder_state),
                (torch.randn(1, 2, ldim), *decoder_state.initial),
                ["latent", *_numbered("state", decoder_state)],
            ),
        }
        outputs = {
            "text_conditioner": ["embeddings"],
            "encoder": ["latents"],
            "lm_main": ["conditioning", "eos_logit", *_numbered("out_state", lm_state)],
            "lm_flow": ["flow_dir"],
            "decoder": ["audio_frame", *_numbered("out_state", decoder_state)],
        }
        dynamic = {
            "text_conditioner": {"token_ids": {1: "tokens"}},
            "encoder": {"audio": {2: "samples"}},
            "lm_main": {"sequence": {1: "frames"}, "text_embeddings": {1: "tokens"}},
            "lm_flow": {},
            "decoder": {"latent": {1: "frames"}},
        }
        for name, (module, inputs, input_names) in graphs.items():
            # its deduplication of equal initializers (random weights' norms are all ones) leaves a
            # node reading a dropped one: keep them all, as inputs, then make them initializers only
            torch.onnx.export(
                module,
                inputs,
                str(paths[name]),
                input_names=input_names,
                output_names=outputs[name],
                dynamic_axes=dynamic[name],
                opset_version=OPSET,
                dynamo=False,
                keep_initializers_as_inputs=True,
            )
            _initializers_not_inputs(paths[name])
    return paths


def _initializers_not_inputs(path: Path) -> None:
    """sherpa-onnx feeds a graph's inputs by position: its weights must not be among them."""
    import onnx

    model = onnx.load(str(path))
    weights = {initializer.name for initializer in model.graph.initializer}
    kept = [value for value in model.graph.input if value.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    onnx.save(model, str(path))


def _numbered(prefix: str, state: FlatState) -> list[str]:
    return [f"{prefix}_{i}" for i in range(len(state.keys))]


def tokenizer_tables(tokenizer: Path, folder: Path) -> None:
    """vocab.json (piece -> id) and token_scores.json (piece -> score) of a sentencepiece model, as
    sherpa-onnx's convert_tokenizer.py writes them."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    (folder / FILES["vocab_json"]).write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
    scores = {p: processor.get_score(i) for i, p in enumerate(pieces)}
    (folder / FILES["token_scores_json"]).write_text(json.dumps(scores, ensure_ascii=False))


INT8 = ("lm_main", "lm_flow", "decoder")  # sherpa-onnx's int8 release quantizes these three


def quantized(paths: dict[str, Path], folder: Path) -> dict[str, Path]:
    """sherpa-onnx's int8 files: dynamic int8 (ONNX Runtime's quantize_dynamic, int8 weights) on the
    matrix products of lm_main, lm_flow and decoder; the encoder and text conditioner stay float32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    result = dict(paths)
    for name in INT8:
        result[name] = folder / f"{name}.int8.onnx"
        quantize_dynamic(
            str(paths[name]), str(result[name]), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"]
        )
    return result


def engine(paths: dict[str, Path], threads: int):
    """sherpa-onnx's OfflineTts over the files, each of its five sessions on `threads` threads."""
    import sherpa_onnx

    pocket = sherpa_onnx.OfflineTtsPocketModelConfig(**{name: str(path) for name, path in paths.items()})
    model = sherpa_onnx.OfflineTtsModelConfig(pocket=pocket, num_threads=threads)
    return sherpa_onnx.OfflineTts(sherpa_onnx.OfflineTtsConfig(model=model))


def voice_audio(path: Path, sample_rate: int) -> torch.Tensor:
    """A voice prompt's audio as pocket-tts encodes it (mono at `sample_rate`, ended on a pause), which
    sherpa-onnx takes as it is (it neither converts the channels nor ends on a pause)."""
    from pocket_tts.data.audio import audio_read
    from pocket_tts.data.audio_utils import convert_audio
    from pocket_tts.models.tts_model import end_on_pause

    audio, rate = audio_read(path)
    return end_on_pause(convert_audio(audio, rate, sample_rate, 1), sample_rate)[0]


def generation(voice: torch.Tensor, sample_rate: int, frames: int, decode_steps: int, temperature: float = 0.0):
    """sherpa-onnx's GenerationConfig: the voice's audio, `frames` latent frames at most (its
    `max_frames`), the flow head's steps, the noise's temperature (its seed 0), silences kept."""
    import sherpa_onnx

    config = sherpa_onnx.GenerationConfig()
    config.reference_audio = voice.tolist()
    config.reference_sample_rate = sample_rate
    config.num_steps = decode_steps
    config.silence_scale = 1.0  # its default shortens silences after generation: the audio as generated
    config.extra = {"temperature": str(temperature), "max_frames": str(frames), "seed": "0"}
    return config
