"""Every built-in model's rewrite decisions under every rule set, as data: what a change to how rules
and rule sets are declared must leave as it was (tests/test_rule_sets.py compares them with
tests/data/decisions.json; `python -m tests.decisions` writes that file anew).

A model's decisions are counted by (rule, applied, what the rule said): the same rules deciding the
same things about the same nodes.
"""

from __future__ import annotations

import collections
import gc
import json
import sys
from pathlib import Path

import torch

SNAPSHOT = Path(__file__).parent / "data" / "decisions.json"
# The built-in models, small: each exported once and explained under every set.
MODELS = [
    "demo:mimi-decoder",
    "demo:seanet-decoder",
    "demo:migan",
    "hf:mimi?frames=2",
    "hf:mimi-codes?frames=2",
    "hf:encodec?seconds=0.2",
    "hf:dac?seconds=0.2",
    "hf:hifigan?frames=10",
    "hf:hifigan-v1?frames=10",
    "diffusers:vae-decoder?latents=8",
    "diffusers:vae-decoder-small?latents=8",
    "vocos:mel?frames=10",
    "pocket-tts:english_2m_2026-10",
]


def rule_sets() -> dict[str, tuple]:
    """Every set phaseconv rewrites with: per target, per peer runtime, before quantization."""
    from phaseconv.litert_export import LITERT_TARGET_RULES
    from phaseconv.onnx_export import ONNX_RULES
    from phaseconv.rules import DEFAULT_RULES, PRE_QUANTIZATION_RULES, TARGET_RULES

    sets = {f"target {name}": rules for name, rules in TARGET_RULES.items()}
    sets |= {f"litert {name}": rules for name, rules in LITERT_TARGET_RULES.items()}
    return sets | {"default": DEFAULT_RULES, "onnx": ONNX_RULES, "before quantization": PRE_QUANTIZATION_RULES}


def counted(decisions) -> dict[str, int]:
    counts = collections.Counter(f"{d.rule} | {d.applied} | {d.reason or d.detail}" for d in decisions)
    return dict(sorted(counts.items()))


def explained(program, rules) -> dict[str, int]:
    """counted(explain(program, rules)), the rewritten copy collected before the next: a graph module
    is a reference cycle, so its weights (gigabytes for a VAE under Winograd) wait for the cycle
    collector, and without it the copies of a dozen sets pile up."""
    from phaseconv.rewrite import explain

    decisions = counted(explain(program, rules))
    gc.collect()
    return decisions


def model_decisions(spec: str) -> dict[str, dict[str, int]]:
    from phaseconv.models.loading import load_model

    program = load_model(spec, random_weights=spec.startswith("pocket-tts:")).program
    return {name: explained(program, rules) for name, rules in rule_sets().items()}


def tts_decisions() -> dict[str, dict[str, int]]:
    """pocket-tts's whole text-to-speech program (english_2m, 256 positions), each method under the
    set phaseconv.lower takes for any CPU."""
    from phaseconv.rules import TARGET_RULES
    from phaseconv.tts.build import tts_programs
    from phaseconv.tts.source import random_model

    programs, _, _ = tts_programs(random_model("english_2m_2026-10"), capacity=256)
    return {name: explained(program, TARGET_RULES["any"]) for name, program in sorted(programs.items())}


def snapshot() -> dict:
    torch.manual_seed(0)
    return {"models": {spec: model_decisions(spec) for spec in MODELS}, "tts": tts_decisions()}


if __name__ == "__main__":
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
