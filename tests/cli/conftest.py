"""Programs several command tests read, lowered once per run."""

import pytest

from tests.cli.test_cli import phaseconv


@pytest.fixture(scope="session")
def seanet_lowering(tmp_path_factory):
    """`phaseconv lower demo:seanet-decoder` as a user runs it: (its result, the .pte written)."""
    path = tmp_path_factory.mktemp("seanet") / "d.pte"
    result = phaseconv("lower", "demo:seanet-decoder", "-o", path)
    assert result.returncode == 0, result.stderr
    return result, path
