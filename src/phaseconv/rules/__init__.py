"""The rule set. Each rule lives in its own module with matches / check / describe / apply."""

from phaseconv.rules.attention import AttentionRule
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.constant_operands import ConstantOperandRule
from phaseconv.rules.conv_transpose import ConvTransposeRule
from phaseconv.rules.elu import EluRule
from phaseconv.rules.fold_constants import FoldConstantsRule
from phaseconv.rules.group_norm import GroupNormRule
from phaseconv.rules.im2col import Im2colRule
from phaseconv.rules.interleaved_rope import InterleavedRopeRule
from phaseconv.rules.istft import IstftRule
from phaseconv.rules.layer_norm import LayerNormRule
from phaseconv.rules.lift_1d import Lift1dRule
from phaseconv.rules.lstm import LstmRule
from phaseconv.rules.mean import MeanRule
from phaseconv.rules.mode_pad import ModePadRule
from phaseconv.rules.nearest_conv import NearestConvRule
from phaseconv.rules.nearest_upsample import NearestUpsampleRule
from phaseconv.rules.padded_taps import PaddedTapsRule
from phaseconv.rules.rotate_half import RotateHalfRule
from phaseconv.rules.short_conv import ShortConvRule
from phaseconv.rules.slice_of_cat import SliceOfCatRule
from phaseconv.rules.slice_scatter import SliceScatterRule
from phaseconv.rules.split_conv import SplitConvRule
from phaseconv.rules.stft import StftRule
from phaseconv.rules.transposed_linear import TransposedLinearRule
from phaseconv.rules.variance import VarianceRule
from phaseconv.rules.views import ViewRule
from phaseconv.rules.winograd import WinogradRule

DEFAULT_RULES: tuple[Rule, ...] = (
    FoldConstantsRule(),
    IstftRule(),
    StftRule(),
    NearestConvRule(),
    ConvTransposeRule(),
    NearestUpsampleRule(),
    EluRule(),
    LayerNormRule(),
    GroupNormRule(),
    AttentionRule(),
    RotateHalfRule(),
    InterleavedRopeRule(),
    MeanRule(),
    VarianceRule(),
    ViewRule(),
    LstmRule(),
    ModePadRule(),
    SliceScatterRule(),
    SliceOfCatRule(),
    PaddedTapsRule(),
    ConstantOperandRule(),
    Lift1dRule(),
    SplitConvRule(),
)
EXTRA_RULES = (WinogradRule(), Im2colRule(), ShortConvRule(), TransposedLinearRule())
RULES_BY_NAME = {rule.name: rule for rule in (*DEFAULT_RULES, *EXTRA_RULES)}
# What phaseconv.lower rewrites with: its lowering delegates fp32 ELU to XNNPACK's own (EluConfig) and
# moves view chains on the channels-last buffer, so the ops after an interleave can stay lifted.
LOWERING_RULES: tuple[Rule, ...] = tuple(
    {"elu": EluRule(xnnpack_elu=True), "lift_1d": Lift1dRule(through_views=True)}.get(r.name, r) for r in DEFAULT_RULES
)
# ... and for a CPU whose XNNPACK convolutions run at half its GEMM speed (phaseconv.targets): the
# convolutions as GEMMs, by Winograd where it applies, else im2col, before split_conv would split them.
AS_GEMMS = (WinogradRule(), Im2colRule())
# 128 channels in and out up to 128x128 outputs, 256 beyond (phaseconv.targets)
AVX512_WINOGRAD = WinogradRule(min_channels=128, square_only=True, large_outputs=128 * 128, min_large_channels=256)
# 1-D convolutions of 8-128 output steps, weights beyond the L2 and windows within it as windows and a
# weight-first linear
AVX512_SHORT_CONV = ShortConvRule(min_outputs=8, max_outputs=128, min_weight_bytes=2**21, max_window_bytes=2**20)
TARGET_RULES: dict[str, tuple[Rule, ...]] = {
    "any": LOWERING_RULES,
    "x86-fma3": tuple(
        r for rule in LOWERING_RULES for r in ((*AS_GEMMS, rule) if rule.name == "split_conv" else (rule,))
    ),
    # ... for AVX-512, where only wide stride-1 3x3 (and 2x2) convolutions paid as Winograd's GEMMs, and
    # linears of 8 to 128 rows with their weight first (XNNPACK's 7-row tiles: rules/transposed_linear.py),
    # large-weight 1-D convolutions of so many steps too, as windows and a linear (rules/short_conv.py)
    "x86-avx512": tuple(
        r
        for rule in LOWERING_RULES
        for r in {"split_conv": (AVX512_WINOGRAD, rule), "lift_1d": (AVX512_SHORT_CONV, rule)}.get(rule.name, (rule,))
    )
    + (TransposedLinearRule(),),
}
# ... and for an AMD one with AVX-512 (a Zen 5), Winograd as there, without the weight-first linears:
# XNNPACK's run-time-weight operator streams W at 13 GB/s there whatever the rows (rules/transposed_linear.py)
TARGET_RULES["x86-avx512-amd"] = tuple(
    r for r in TARGET_RULES["x86-avx512"] if r.name not in ("transposed_linear", "short_conv")
)
# What phaseconv.quantize rewrites with before quantizing: no pad that its quantizer leaves in fp32,
# no split of large float weights (int8 weights are a quarter of the size: measured for fp32), no
# rotary embedding as a linear layer (the quantizer would make its signed permutation int8), and ELU
# kept one operator: between int8 neighbours XNNPACK runs it as its int8 ELU (phaseconv.lower enables
# it), where its decomposition was requantized op by op (pocket-tts's int8 step: 1.79 -> 1.66 ms,
# 36.9 -> 37.5 dB).
PRE_QUANTIZATION_RULES: tuple[Rule, ...] = tuple(
    {"conv_transpose": ConvTransposeRule(crop_by_phase=False), "elu": EluRule(xnnpack_elu=True)}.get(r.name, r)
    for r in DEFAULT_RULES
    if r.name not in ("split_conv", "interleaved_rope")
)

__all__ = [
    "DEFAULT_RULES",
    "LOWERING_RULES",
    "PRE_QUANTIZATION_RULES",
    "RULES_BY_NAME",
    "TARGET_RULES",
    "Rule",
    "Skip",
    "resolve_rules",
]


def resolve_rules(rules) -> tuple[Rule, ...]:
    """None -> every rule; otherwise rule objects or rule names."""
    if rules is None:
        return DEFAULT_RULES
    if isinstance(rules, str):
        rules = [rules]
    resolved = []
    for rule in rules:
        if isinstance(rule, str):
            if rule not in RULES_BY_NAME:
                raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(RULES_BY_NAME)}")
            rule = RULES_BY_NAME[rule]
        resolved.append(rule)
    return tuple(resolved)
