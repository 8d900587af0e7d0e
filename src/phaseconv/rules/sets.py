"""Every rule set phaseconv rewrites with, as values: the stages in the order they run, one rule of
each name in the default set, and each other set built from it by `replace`, `without` and
`insert_before`. A rule's name and its set name its configuration; how much a set's choices gained
is measured by the benchmarks the comments name (tables in docs/measurements.md and docs/runtimes.md).
"""

from __future__ import annotations

import math

from phaseconv.rules.attention import AttentionRule
from phaseconv.rules.base import Rule
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

# The stages, in the order the driver runs them (a rule's `stage`): each is planned on what the
# stages before it left.
STAGES = {
    0: "constants folded, and rewrites whose output a later rule rewrites (istft, nearest_conv)",
    1: "the rewrites: transposed convolutions, upsampling, normalization, attention, state",
    2: "clean-ups of what the rewrites emit (slices of a cat, taps that read only padding), rotary embeddings",
    3: "layout: 1-D regions lifted to 2-D, short convolutions as windows",
    4: "convolutions and linears as GEMMs where that pays on the target (winograd, im2col, split_conv)",
}


class RuleSet(tuple):
    """Rules in the order they are tried: by stage, then as listed (the first that plans a node takes it)."""

    def __new__(cls, rules=()):
        rules = tuple(rules)
        for rule in rules:
            if rule.stage not in STAGES:
                raise ValueError(f"rule {rule.name}: stage {rule.stage} is none of {sorted(STAGES)}")
        return super().__new__(cls, rules)

    def named(self) -> dict[str, Rule]:
        return {rule.name: rule for rule in self}

    def replace(self, *rules: Rule) -> RuleSet:
        """These rules in place of the set's rules of their names."""
        by_name = {rule.name: rule for rule in rules}
        missing = set(by_name) - set(self.named())
        if missing:
            raise ValueError(f"no rule {sorted(missing)} in the set to replace")
        return RuleSet(by_name.get(rule.name, rule) for rule in self)

    def without(self, *names: str) -> RuleSet:
        missing = set(names) - set(self.named())
        if missing:
            raise ValueError(f"no rule {sorted(missing)} in the set to leave out")
        return RuleSet(rule for rule in self if rule.name not in names)

    def insert_before(self, name: str, *rules: Rule) -> RuleSet:
        """`rules` just before the rule `name` (tried before it on a node both take)."""
        at = [rule.name for rule in self].index(name)
        return RuleSet((*self[:at], *rules, *self[at:]))

    def plus(self, *rules: Rule) -> RuleSet:
        return RuleSet((*self, *rules))


# Every rule, as it runs on any CPU and runtime, in the order tried within a stage.
DEFAULT = RuleSet(
    (
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
)
# Rules in no set by default, used by targets and peers below, by name in RULES_BY_NAME.
EXTRA = RuleSet((WinogradRule(), Im2colRule(), ShortConvRule(), TransposedLinearRule()))

# phaseconv.lower: its lowering delegates fp32 ELU to XNNPACK's own (EluConfig) and moves view chains
# on the channels-last buffer (lowering/layout.py), so the operators after an interleave stay lifted.
LOWERING = DEFAULT.replace(EluRule(xnnpack_elu=True), Lift1dRule(through_views=True))
# For a CPU whose convolutions run at half its GEMM speed (targets.py): Winograd where it applies,
# else im2col, before split_conv would split them (benchmarks/variants.py).
AS_GEMMS = (WinogradRule(), Im2colRule())
# AVX-512: Winograd from 128 channels up to 128x128 outputs, 256 beyond (benchmarks/variants.py).
AVX512_WINOGRAD = WinogradRule(min_channels=128, square_only=True, large_outputs=128 * 128, min_large_channels=256)
# AVX-512: 1-D convolutions of 8-128 steps with large weights as windows and a weight-first linear.
AVX512_SHORT_CONV = ShortConvRule(min_outputs=8, max_outputs=128, min_weight_bytes=2**21, max_window_bytes=2**20)
AVX512 = (
    LOWERING.insert_before("split_conv", AVX512_WINOGRAD)
    .insert_before("lift_1d", AVX512_SHORT_CONV)
    .plus(TransposedLinearRule())  # XNNPACK's 7-row tiles read the weight per tile (rules/transposed_linear.py)
)
# Per target CPU (targets.py). On an AMD Zen 5 XNNPACK's run-time-weight linear streams its input at
# the same rate whatever the rows: no weight-first linears there (benchmarks/variants.py).
TARGETS: dict[str, RuleSet] = {
    "any": LOWERING,
    "x86-fma3": LOWERING.insert_before("split_conv", *AS_GEMMS),
    "x86-avx512": AVX512,
    "x86-avx512-amd": AVX512.without("transposed_linear", "short_conv"),
}
# phaseconv.quantize's rewrite before quantizing: no pad its quantizer leaves fp32, no split of large
# float weights (int8 ones are a quarter), no rotary embedding as a linear (its permutation would be
# quantized), ELU one operator (XNNPACK runs it in int8 between int8 neighbours): docs/int8.md.
BEFORE_QUANTIZATION = DEFAULT.without("split_conv", "interleaved_rope").replace(
    ConvTransposeRule(crop_by_phase=False), EluRule(xnnpack_elu=True)
)
# ONNX Runtime has its own ELU, LayerNormalization, Resize and LSTM, and a ConvTranspose that beats the
# 2-D polyphase form; these are the rules that paid there, each alone (benchmarks/peer_rules.py).
ONNX = RuleSet(
    (
        DEFAULT.named()["fold_constants"],
        NearestConvRule(max_mac_overhead=math.inf),  # one ConvTranspose ORT runs itself
        ConvTransposeRule(spatial_dims=(1,), split_depthwise=False),  # 1-D only; fewer nodes
        DEFAULT.named()["elu"],
        ModePadRule(modes=("reflect",)),
        DEFAULT.named()["views"],
        DEFAULT.named()["constant_operands"],
        DEFAULT.named()["padded_taps"],
        EXTRA.named()["short_conv"],  # ORT's Conv takes as long for 2 outputs as for 16
        DEFAULT.named()["istft"],  # a complex spectrum does not export at all
    )
)
# LiteRT: litert-torch converts to NHWC end to end with its own ELU, layer norm and padding; these
# paid there (benchmarks/peer_rules.py --runtime litert). Group averages as `mean`: litert-torch
# fails on the linear form.
LITERT = RuleSet(
    (
        *(DEFAULT.named()[name] for name in ("fold_constants", "nearest_conv", "conv_transpose", "nearest_upsample")),
        DEFAULT.named()["elu"],
        ModePadRule(modes=("reflect",)),
        *(DEFAULT.named()[name] for name in ("views", "constant_operands", "padded_taps", "istft")),
        GroupNormRule(averages_as_linear=False),
    )
)
# On AVX-512 LiteRT's wide 3x3 convolutions pay as Winograd's GEMMs too; not measured without it.
LITERT_TARGETS: dict[str, RuleSet] = {"any": LITERT, "x86-fma3": LITERT}
LITERT_TARGETS |= dict.fromkeys(("x86-avx512", "x86-avx512-amd"), LITERT.plus(AVX512_WINOGRAD))

RULES_BY_NAME: dict[str, Rule] = {**DEFAULT.named(), **EXTRA.named()}


def resolve(rules, within: RuleSet = DEFAULT) -> RuleSet:
    """None -> `within`; otherwise rule objects, or names: the rule of that name in `within` (its
    configuration there), else the catalogue's (RULES_BY_NAME)."""
    if rules is None:
        return within
    if isinstance(rules, str):
        rules = [rules]
    resolved = []
    for rule in rules:
        if isinstance(rule, str):
            if rule not in within.named() and rule not in RULES_BY_NAME:
                raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(RULES_BY_NAME)}")
            rule = within.named().get(rule) or RULES_BY_NAME[rule]
        resolved.append(rule)
    return RuleSet(resolved)
