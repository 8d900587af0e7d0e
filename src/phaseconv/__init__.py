"""phaseconv: fast upsampling layers for on-device PyTorch models.

ep = torch.export.export(model, example_inputs)
fast = phaseconv.rewrite(ep)          # a new ExportedProgram, numerically the same
for d in phaseconv.explain(ep): ...   # what was rewritten, and why anything was left alone
"""

from phaseconv.report import Decision
from phaseconv.rewrite import explain, rewrite

__all__ = ["Decision", "explain", "rewrite"]
