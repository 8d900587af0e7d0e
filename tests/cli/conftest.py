"""Programs several command tests read, lowered once per run."""

import pytest
import torch

from tests.cli.factories import small_decoder
from tests.cli.test_cli import phaseconv


@pytest.fixture(scope="session")
def pt2(tmp_path_factory):
    """The small decoder saved with torch.export.save."""
    module, inputs = small_decoder()
    path = tmp_path_factory.mktemp("models") / "decoder.pt2"
    torch.export.save(torch.export.export(module, inputs), path)
    return path


@pytest.fixture(scope="session")
def seanet_lowering(tmp_path_factory):
    """`phaseconv lower demo:seanet-decoder` as a user runs it: (its result, the .pte written)."""
    path = tmp_path_factory.mktemp("seanet") / "d.pte"
    result = phaseconv("lower", "demo:seanet-decoder", "-o", path)
    assert result.returncode == 0, result.stderr
    return result, path
