"""phaseconv: fast upsampling layers for on-device PyTorch models.

ep = torch.export.export(model, example_inputs)
fast = phaseconv.rewrite(ep)          # a new ExportedProgram, numerically the same
for d in phaseconv.explain(ep): ...   # what was rewritten, and why anything was left alone
qep = phaseconv.quantize(ep, calibration_inputs)   # int8 (PT2E, XNNPACK quantizer); lower() rewrites it
model, decisions = phaseconv.export_onnx(ep, "model.onnx")   # for ONNX Runtime (pip install 'phaseconv[onnx]')
model, decisions = phaseconv.export_litert(ep, "model.tflite")   # for LiteRT (pip install 'phaseconv[litert]')
"""

import logging as _logging

# executorch pulls in torchao, which logs a warning per optional CUDA kernel it cannot load on a CPU
# machine, and torch logs a pytree deprecation on that import: silence both for the import only.
_noisy = [_logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
_levels = [logger.level for logger in _noisy]
for _logger in _noisy:
    _logger.setLevel(_logging.ERROR)
try:
    from phaseconv.errors import PhaseconvError
    from phaseconv.litert_export import export_litert
    from phaseconv.lowering import LoweredProgram, inspect, lower
    from phaseconv.onnx_export import export_onnx
    from phaseconv.prepare import prepare
    from phaseconv.quantize import quantize
    from phaseconv.report import Decision
    from phaseconv.rewrite import explain, rewrite
finally:
    for _logger, _level in zip(_noisy, _levels):
        _logger.setLevel(_level)

__all__ = [
    "Decision",
    "LoweredProgram",
    "PhaseconvError",
    "explain",
    "export_litert",
    "export_onnx",
    "inspect",
    "lower",
    "prepare",
    "quantize",
    "rewrite",
]
