"""`phaseconv.prepare(model)`: a copy of a module that exports to a graph the backend can lower.

Two things in real decoders stop lowering before any graph rule can help:
- weight_norm recomputes each weight g * v / ||v|| on every call, so the backend never sees a
  constant weight and runs the convolution portable; the copy bakes the weights.
- conv wrappers of `transformers` (Mimi, EnCodec) keep stride, kernel size and padding as 0-d int64
  tensors and compute the padding with tensor arithmetic, so every length after them is
  data-dependent at export; the copy holds them as Python ints and computes the padding with ints.
Numerics do not change: the same weights and the same padding, computed once.
"""

from __future__ import annotations

import copy
import types

import torch
from torch import nn
from torch.nn.utils import parametrize

STATIC_CONV_SETTINGS = ("stride", "kernel_size", "padding_total", "padding_left", "padding_right")


def prepare(model: nn.Module, bake_weight_norm: bool = True) -> nn.Module:
    """A copy of `model` with weight_norm baked and tensor-valued conv settings made static.

    bake_weight_norm=False keeps weight_norm (to measure what it costs).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(model).__module__}.{type(model).__qualname__}")
    # The hook-based torch.nn.utils.weight_norm keeps the computed weight as a non-leaf tensor
    # attribute, which deepcopy refuses; the copy gets it detached (it is recomputed when baked).
    computed = {
        id(value): value.detach().clone()
        for module in model.modules()
        for value in vars(module).values()
        if isinstance(value, torch.Tensor) and not value.is_leaf
    }
    prepared = copy.deepcopy(model, computed)
    for module in prepared.modules():
        if bake_weight_norm:
            _bake_weight_norm(module)
        if hasattr(module, "_get_extra_padding_for_conv1d"):
            _make_padding_static(module)
    return prepared


def _bake_weight_norm(module: nn.Module) -> None:
    if parametrize.is_parametrized(module):
        # deepcopy shares the generated Parametrized* class with the original, and removing a
        # parametrization deletes its property from that class: give the copy a class of its own.
        shared = type(module)
        namespace = {k: v for k, v in shared.__dict__.items() if k not in ("__dict__", "__weakref__")}
        module.__class__ = type(shared.__name__, shared.__bases__, namespace)
        for name in list(module.parametrizations.keys()):
            parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    if hasattr(module, "weight_g") and hasattr(module, "weight_v"):  # torch.nn.utils.weight_norm (hooks)
        nn.utils.remove_weight_norm(module)


def _make_padding_static(module: nn.Module) -> None:
    """0-d integer tensors -> ints, and the extra padding of `pad_for_conv1d` computed with ints."""
    for name in STATIC_CONV_SETTINGS:
        value = getattr(module, name, None)
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
            if name in module._buffers:
                del module._buffers[name]
            setattr(module, name, int(value))
    module._get_extra_padding_for_conv1d = types.MethodType(_extra_padding, module)


def _extra_padding(self: nn.Module, hidden_states: torch.Tensor) -> int:
    """transformers' `_get_extra_padding_for_conv1d` with ints: pad so that the last window is full.

    n_frames = ceil((L - k + p) / s), computed as -((k - p - L) // s) so that a symbolic length
    stays symbolic (no float); extra = n_frames * s + k - p - L.
    """
    length = hidden_states.shape[-1]
    kernel, stride, padding = self.kernel_size, self.stride, self.padding_total
    n_frames = -((kernel - padding - length) // stride)
    return n_frames * stride + kernel - padding - length
