"""`phaseconv.export_litert(ep, path)`: the rewrites that make LiteRT faster, then conversion to .tflite.

LiteRT runs its own XNNPACK delegate, but not as ExecuTorch does: litert-torch converts the program
to NHWC end to end and has its own forms of ELU, layer norm and padding, so not every rule that pays
for ExecuTorch pays there. Which rules pay was measured per rule and model
(`python benchmarks/peer_rules.py --runtime litert`, docs/runtimes.md); LITERT_RULES are those.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.report import Decision
from phaseconv.rewrite import rewrite_and_convert
from phaseconv.rules import AVX512_WINOGRAD, RULES_BY_NAME
from phaseconv.rules.group_norm import GroupNormRule
from phaseconv.rules.mode_pad import ModePadRule
from phaseconv.targets import resolve_target

# Measured with litert-torch 0.10 and ai-edge-litert 2.3, 1 thread, on an Intel Xeon (AVX-512)
# (results/xeon/litert_rules.json; each rule alone, stock conversion / rewritten): transposed
# convolutions pay most (Mimi's decoder on one frame 1.19x, EnCodec 1.06x, MI-GAN 1.85x), computed
# as ExecuTorch's rewrite does, a depthwise one as one depthwise convolution per phase (this set on
# MI-GAN: 2.47x with that split, 2.23x with one grouped convolution; Mimi 1.33x either way:
# `peer_rules.py --runtime litert --no-alone`, results/xeon/litert_export_rules.json); reflect
# padding (EnCodec 1.09x), ELU (Mimi 1.06x, EnCodec 0.97x), padded_taps (Mimi 1.06x), nearest
# upsampling (MI-GAN 1.07x), folding and constant operands (MI-GAN 1.10x, 1.05x); views neutral.
# Left to LiteRT: layer norm (Mimi 0.93x), the LSTM (EnCodec 0.98x), lift_1d (0.90x on both),
# attention (1.00x). The U-Net's 2-D k2 s2 transposed convolutions gain nothing (1.02x):
# litert-torch emits no DEPTH_TO_SPACE (it decomposes even pixel_shuffle into reshapes and
# transposes), so the 2-D interleave is reshapes and transposes there too.
# A convolution of a nearest upsample becomes a transposed one, then polyphase (nearest_conv): the small
# VAE decoder's export 1.05x (results/xeon/litert_rules.json; 0.99x the day before, without it).
# An iSTFT head whose spectrum is complex (Vocos) does not convert (litert-torch has no complex64);
# the istft rule makes it a transposed convolution. Group norm with its group averages as `mean`
# (litert-torch fails on the linear ExecuTorch's form uses, "'tfl.batch_matmul' op found invalid output
# rank"): the small VAE decoder 1.04x alone, SD 1.x 1.00x.
LITERT_RULES = (
    RULES_BY_NAME["fold_constants"],
    RULES_BY_NAME["nearest_conv"],
    RULES_BY_NAME["conv_transpose"],
    RULES_BY_NAME["nearest_upsample"],
    RULES_BY_NAME["elu"],
    ModePadRule(modes=("reflect",)),
    RULES_BY_NAME["views"],
    RULES_BY_NAME["constant_operands"],
    RULES_BY_NAME["padded_taps"],
    RULES_BY_NAME["istft"],
    GroupNormRule(averages_as_linear=False),
)


# Per target CPU (phaseconv.targets), as `lower` has. On AVX-512, also the stride-1 3x3 convolutions
# of 128 channels and more as F(2, 3x3), with ExecuTorch's limit for large outputs: against the stock
# conversion, LITERT_RULES -> these, 1 / 2 threads (`peer_rules.py --runtime litert --no-alone --only
# NAME --threads T`, results/xeon/litert_export_rules.json): U-Net 0.98x -> 1.14x / 1.02x -> 1.08x,
# StyleGAN2-like 2.04x -> 2.36x / 2.73x -> 2.82x, MI-GAN-like 2.49x -> 2.63x / 3.28x -> 3.37x.
# Not measured on LiteRT without AVX-512: x86-fma3 takes the rules for any CPU; an AMD one with AVX-512
# those of x86-avx512 (its benchmarks/models.py LiteRT rows on a Zen 5 were made so).
LITERT_TARGET_RULES = {"any": LITERT_RULES, "x86-fma3": LITERT_RULES}
LITERT_TARGET_RULES |= dict.fromkeys(("x86-avx512", "x86-avx512-amd"), (*LITERT_RULES, AVX512_WINOGRAD))


def export_litert(
    ep: ExportedProgram, path: str | Path | None = None, rules=None, calibration=None, target: str = "any"
) -> tuple[bytes, list[Decision]]:
    """Rewrite `ep` with `rules` (those that pay on LiteRT for the CPU `target` if None: one of
    phaseconv.targets.TARGETS) and convert it to a LiteRT model; write it to `path` (atomically) if given.
    With `calibration` (input tuples), the rewritten program is quantized to int8 first (static,
    per-channel weights, litert-torch's quantizer): the polyphase convolutions get their own scales.

    Returns the .tflite model's bytes and the rewrite decisions.
    """
    from phaseconv.runtimes.litert import to_tflite

    if rules is not None and target != "any":
        raise PhaseconvError("give export_litert rules or a target, not both: the target chooses the rules")
    rules = LITERT_TARGET_RULES[resolve_target(target)] if rules is None else rules
    return rewrite_and_convert(ep, rules, partial(to_tflite, calibration=calibration), path)
