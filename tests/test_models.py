"""The reference models: after phaseconv.rewrite, one XNNPACK partition, nothing outside, eager's numbers."""

import pytest
import torch

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.models.audio import mimi_decoder
from phaseconv.models.image import migan_generator
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_one_partition_matching, export, run

SMALL = {
    "mimi-decoder": lambda: mimi_decoder(frames=2, latent=32, channels=64),
    "migan": lambda: migan_generator(size=32, width=8),
    "migan-fp16": lambda: migan_generator(size=32, width=8, dtype=torch.float16),
}


# fp16 (22 s here) runs with -m slow: the same graph as fp32, each op in half precision
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "migan-fp16" else n for n in SMALL])
def test_reference_model_lowers_to_one_partition(name):
    module, inputs = SMALL[name]()
    ep = export(module, *inputs)
    stock = summarize_pte(to_xnnpack(ep).buffer)
    assert stock.partitions > 1 and stock.outside, "the stock lowering splits these models"
    rewritten = phaseconv.rewrite(ep)
    summary, (out,) = assert_one_partition_matching(rewritten, ep, *inputs, scaled=True)
    assert summary.inside["XNNConvTranspose2d"] == 0
    if name == "mimi-decoder":
        assert float((out - run(ep, *inputs)).abs().max()) * 32768 < 1, "within one 16-bit PCM step"
