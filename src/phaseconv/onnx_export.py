"""`phaseconv.export_onnx(ep, path)`: the rewrites that make ONNX Runtime faster, then ONNX export.

ONNX Runtime is not XNNPACK: it has its own ELU, LayerNormalization, Resize, reflect Pad and a
native LSTM, so the rules that replace those for XNNPACK would only add operators there. ONNX_RULES
(rules/sets.py) are those that paid, measured per rule and model (`python benchmarks/peer_rules.py`,
docs/runtimes.md).
"""

from __future__ import annotations

from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.report import Decision
from phaseconv.rewrite import rewrite_and_convert
from phaseconv.rules.sets import ONNX as ONNX_RULES


def export_onnx(ep: ExportedProgram, path: str | Path | None = None, rules=ONNX_RULES) -> tuple[bytes, list[Decision]]:
    """Rewrite `ep` with `rules` and export it to ONNX; write it to `path` (atomically) if given.

    Returns the ONNX model's bytes and the rewrite decisions.
    """
    from phaseconv.runtimes.onnxruntime import to_onnx

    return rewrite_and_convert(ep, rules, to_onnx, path)
