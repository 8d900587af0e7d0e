"""The rule sets as values: built from the default set by replace / without / insert_before, every
rule's stage one of the declared stages, a rule name resolved to its configuration in a set; and the
decisions every built-in model gets under every set, as they were (tests/data/decisions.json)."""

import json

import pytest

from phaseconv.rules import RULES_BY_NAME, STAGES, RuleSet, resolve_rules
from phaseconv.rules.conv_transpose import ConvTransposeRule
from phaseconv.rules.sets import DEFAULT, LITERT_TARGETS, ONNX, TARGETS


def test_sets_are_built_from_the_default_and_keep_its_order():
    assert [r.name for r in TARGETS["any"]] == [r.name for r in DEFAULT]
    fma3 = [r.name for r in TARGETS["x86-fma3"]]
    assert fma3.index("winograd") < fma3.index("im2col") < fma3.index("split_conv")
    assert "transposed_linear" in RuleSet(TARGETS["x86-avx512"]).named()
    assert not {"transposed_linear", "short_conv"} & set(TARGETS["x86-avx512-amd"].named())
    assert all(rule.stage in STAGES for rules in (*TARGETS.values(), ONNX, *LITERT_TARGETS.values()) for rule in rules)


def test_a_set_refuses_what_it_does_not_hold():
    with pytest.raises(ValueError, match="no rule"):
        DEFAULT.without("no_such_rule")
    with pytest.raises(ValueError, match="no rule"):
        ONNX.replace(RULES_BY_NAME["lstm"])
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        resolve_rules(["nope"])


def test_a_rule_name_means_its_configuration_in_the_set_it_is_named_in():
    """--rules conv_transpose on `phaseconv onnx` is ONNX's transposed convolution rule (1-D only),
    not the one phaseconv.lower uses."""
    (onnx_rule,) = resolve_rules(["conv_transpose"], ONNX)
    (default_rule,) = resolve_rules(["conv_transpose"])
    assert onnx_rule is ONNX.named()["conv_transpose"] and default_rule is DEFAULT.named()["conv_transpose"]
    assert isinstance(onnx_rule, ConvTransposeRule) and onnx_rule is not default_rule
    (only_in_catalogue,) = resolve_rules(["winograd"], ONNX)
    assert only_in_catalogue is RULES_BY_NAME["winograd"]


@pytest.mark.slow  # every built-in model exported and explained under every set: minutes
def test_every_built_in_model_gets_the_decisions_it_got():
    from tests.decisions import SNAPSHOT, snapshot

    assert snapshot() == json.loads(SNAPSHOT.read_text()), "rewrite decisions changed: python -m tests.decisions"
