"""The rules, one module each (a pattern, its check and its rewrite: base.Rule), and the sets they
run in (sets.py): the public names below are those sets."""

from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.sets import AVX512_WINOGRAD, RULES_BY_NAME, STAGES, RuleSet
from phaseconv.rules.sets import BEFORE_QUANTIZATION as PRE_QUANTIZATION_RULES
from phaseconv.rules.sets import DEFAULT as DEFAULT_RULES
from phaseconv.rules.sets import LOWERING as LOWERING_RULES
from phaseconv.rules.sets import TARGETS as TARGET_RULES
from phaseconv.rules.sets import resolve as resolve_rules

__all__ = [
    "AVX512_WINOGRAD",
    "DEFAULT_RULES",
    "LOWERING_RULES",
    "PRE_QUANTIZATION_RULES",
    "RULES_BY_NAME",
    "STAGES",
    "TARGET_RULES",
    "Rule",
    "RuleSet",
    "Skip",
    "resolve_rules",
]
