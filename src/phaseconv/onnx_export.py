"""`phaseconv.export_onnx(ep, path)`: the rewrites that make ONNX Runtime faster, then ONNX export.

ONNX Runtime is not XNNPACK: it has its own ELU, LayerNormalization, Resize, reflect Pad and a
native LSTM, so the rules that replace those for XNNPACK would only add operators there. Which
rules pay was measured per rule and model (`python benchmarks/onnx_rules.py`, README); ONNX_RULES
are those.
"""

from __future__ import annotations

from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.report import Decision
from phaseconv.rewrite import require_program, rewrite_with_report

ONNX_RULES = ("fold_constants", "conv_transpose", "views", "constant_operands", "slice_of_cat")


def export_onnx(ep: ExportedProgram, path: str | Path | None = None, rules=ONNX_RULES) -> tuple[bytes, list[Decision]]:
    """Rewrite `ep` with `rules` and export it to ONNX; write it to `path` (atomically) if given.

    Returns the ONNX model's bytes and the rewrite decisions.
    """
    from phaseconv.lowering import write_atomically
    from phaseconv.runtimes.onnxruntime import to_onnx

    require_program(ep)
    rewritten, decisions = rewrite_with_report(ep, rules)
    model = to_onnx(rewritten)
    if path is not None:
        write_atomically(Path(path), model)
    return model, decisions
