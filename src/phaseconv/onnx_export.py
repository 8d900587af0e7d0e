"""`phaseconv.export_onnx(ep, path)`: the rewrites that make ONNX Runtime faster, then ONNX export.

ONNX Runtime is not XNNPACK: it has its own ELU, LayerNormalization, Resize, reflect Pad and a
native LSTM, so the rules that replace those for XNNPACK would only add operators there. Which
rules pay was measured per rule and model (`python benchmarks/peer_rules.py`, docs/runtimes.md); ONNX_RULES
are those.
"""

from __future__ import annotations

import math
from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.report import Decision
from phaseconv.rewrite import rewrite_and_convert
from phaseconv.rules import RULES_BY_NAME
from phaseconv.rules.conv_transpose import ConvTransposeRule
from phaseconv.rules.mode_pad import ModePadRule
from phaseconv.rules.nearest_conv import NearestConvRule

# Measured with ONNX Runtime 1.32, 1 thread (results/onnx_rules.json): 1-D transposed convolutions
# pay (Mimi 1.11x, EnCodec 1.07x), 2-D ones do not (MI-GAN 0.75x, StyleGAN2 0.84x, U-Net 0.90x: ORT's
# ConvTranspose beats conv + depth-to-space there); ELU and reflect padding pay on EnCodec (1.05x,
# 1.04x); views, constants and folding are neutral to slightly faster. ORT's own LayerNormalization,
# attention and LSTM are left to it (the rules gain nothing there). The taps that read only zero
# padding are dropped too (padded_taps, which fires on short inputs only): less work on any runtime,
# though on Mimi's decoder on one frame ORT's run-to-run spread hid it (an AMD Zen 5, `peer_rules.py
# --only "1 frame"`: alone 1.09x in one run, 0.93x in another where every rule alone gave 0.88-0.98x).
# A convolution of at most 4 outputs is a MatMul with its weight (short_conv, ONNX only: ORT's Conv
# takes as long for 2 outputs as for 16): Mimi's decoder on one frame, alone 1.10x, export_onnx 1.28x
# at 1 thread and 1.15x at 2 (the same machine, results/onnx_rules.json). A depthwise transposed
# convolution stays one grouped convolution (channel multiplier s), not XNNPACK's s depthwise ones and
# a cat: fewer nodes, which ORT pays for per call. pocket-tts's streaming step (a stride-16 one), by
# hand, stock export time / export_onnx's per frame at 1 / 2 threads: split 1.00x / 0.98x (0.85x at 2
# in another run), one conv 1.08x / 1.00x; the Mimi decoders the same either way (1.13-1.26x).
# A convolution of a nearest upsample (Stable Diffusion's x2 + 3x3) is merged into one ConvTranspose that ORT
# runs itself (nearest_conv without conv_transpose's multiply-add limit: 2-D polyphase loses on ORT): the SD 1.x
# VAE decoder's ORT export 1.06x faster on an Intel Xeon (results/xeon/models.json; 1.00x the day before,
# without it); the small one, whose only upsampler has 64 channels, 0.99x alone (results/xeon/onnx_rules.json).
# An iSTFT head that builds its spectrum in complex arithmetic (Vocos: mag * (cos + 1j * sin)) does not
# export to ONNX at all (complex64 tensors); the istft rule makes it real: a transposed convolution.
ONNX_RULES = (
    RULES_BY_NAME["fold_constants"],
    NearestConvRule(max_mac_overhead=math.inf),
    ConvTransposeRule(spatial_dims=(1,), split_depthwise=False),
    RULES_BY_NAME["elu"],
    ModePadRule(modes=("reflect",)),
    RULES_BY_NAME["views"],
    RULES_BY_NAME["constant_operands"],
    RULES_BY_NAME["padded_taps"],
    RULES_BY_NAME["short_conv"],
    RULES_BY_NAME["istft"],
)


def export_onnx(ep: ExportedProgram, path: str | Path | None = None, rules=ONNX_RULES) -> tuple[bytes, list[Decision]]:
    """Rewrite `ep` with `rules` and export it to ONNX; write it to `path` (atomically) if given.

    Returns the ONNX model's bytes and the rewrite decisions.
    """
    from phaseconv.runtimes.onnxruntime import to_onnx

    return rewrite_and_convert(ep, rules, to_onnx, path)
