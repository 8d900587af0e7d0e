"""`phaseconv.export_litert(ep, path)`: the rewrites that make LiteRT faster, then conversion to .tflite.

LiteRT runs its own XNNPACK delegate, but not as ExecuTorch does: litert-torch converts the program
to NHWC end to end and has its own forms of ELU, layer norm and padding, so not every rule that pays
for ExecuTorch pays there. Which rules pay was measured per rule and model
(`python benchmarks/peer_rules.py --runtime litert`, docs/runtimes.md); LITERT_RULES are those.
"""

from __future__ import annotations

from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.report import Decision
from phaseconv.rewrite import rewrite_and_convert
from phaseconv.rules import RULES_BY_NAME
from phaseconv.rules.conv_transpose import ConvTransposeRule
from phaseconv.rules.mode_pad import ModePadRule

LITERT_RULES = (
    RULES_BY_NAME["fold_constants"],
    ConvTransposeRule(split_depthwise=False),
    RULES_BY_NAME["nearest_upsample"],
    RULES_BY_NAME["elu"],
    ModePadRule(modes=("reflect",)),
    RULES_BY_NAME["views"],
    RULES_BY_NAME["constant_operands"],
    RULES_BY_NAME["padded_taps"],
)


def export_litert(
    ep: ExportedProgram, path: str | Path | None = None, rules=LITERT_RULES
) -> tuple[bytes, list[Decision]]:
    """Rewrite `ep` with `rules` and convert it to a LiteRT model; write it to `path` (atomically) if given.

    Returns the .tflite model's bytes and the rewrite decisions.
    """
    from phaseconv.runtimes.litert import to_tflite

    return rewrite_and_convert(ep, rules, to_tflite, path)
