"""Whole reference models: stock XNNPACK lowering vs phaseconv's, through the ExecuTorch runtime."""

from __future__ import annotations

from phaseconv.models import DEMO_MODELS

MODELS = {
    "mimi-decoder (12 frames, 0.96 s)": DEMO_MODELS["mimi-decoder"],
    "seanet-decoder (25 steps, 1 s)": DEMO_MODELS["seanet-decoder"],
    "migan 128x128 fp32": DEMO_MODELS["migan"],
    "migan 128x128 fp16": DEMO_MODELS["migan-fp16"],
}
