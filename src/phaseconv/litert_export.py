"""`phaseconv.export_litert(ep, path)`: the rewrites that make LiteRT faster, then conversion to .tflite.

LiteRT runs its own XNNPACK delegate, but not as ExecuTorch does: litert-torch converts the program
to NHWC end to end and has its own forms of ELU, layer norm and padding, so not every rule that pays
for ExecuTorch pays there. LITERT_RULES (rules/sets.py) are those that paid, measured per rule and
model (`python benchmarks/peer_rules.py --runtime litert`, docs/runtimes.md).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.report import Decision
from phaseconv.rewrite import rewrite_and_convert
from phaseconv.rules.sets import LITERT as LITERT_RULES
from phaseconv.rules.sets import LITERT_TARGETS as LITERT_TARGET_RULES
from phaseconv.targets import resolve_target

__all__ = ["LITERT_RULES", "LITERT_TARGET_RULES", "export_litert"]


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
