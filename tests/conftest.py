"""What every test file shares."""

import ctypes
import ctypes.util
import gc
import json
from pathlib import Path

import pytest

from tests.shared import SPOKEN, made_once

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None


@pytest.fixture(autouse=True, scope="module")
def _memory_back_after_each_file():
    """A test worker runs many files in one process: what a file's fixtures held (programs, models)
    goes back to the system when the file ends (glibc keeps freed memory otherwise), so that the next
    file's peak does not stack on it."""
    yield
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


@pytest.fixture(scope="session")
def stand_in_hub(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """SPOKEN's files in a stand-in hub cache (stand_in_cache), laid out once for the test run:
    (the cache's root, the files' paths)."""
    from phaseconv.tts.stand_ins import stand_in_cache

    def make(folder: Path):
        paths = stand_in_cache(folder, SPOKEN)
        (folder / "paths.json").write_text(json.dumps({name: str(path) for name, path in paths.items()}))

    folder = made_once(tmp_path_factory, "stand-in-hub", make)
    return folder, {name: Path(path) for name, path in json.loads((folder / "paths.json").read_text()).items()}


@pytest.fixture(scope="session")
def lowered_from_hub(stand_in_hub, tmp_path_factory) -> tuple[dict, Path]:
    """`phaseconv lower pocket-tts-tts:SPOKEN -o tts.pte --json` on that cache, no other flag: (its
    report, the file). Lowering it takes minutes, so the files that speak with it share one."""
    from phaseconv.tts.stand_ins import environment
    from tests.cli.test_cli import WHOLE_PROGRAM_SECONDS, phaseconv

    def make(folder: Path):
        path = folder / "tts.pte"
        result = phaseconv(
            "lower", f"pocket-tts-tts:{SPOKEN}", "-o", path, "--json",
            env=environment(stand_in_hub[0]), timeout=WHOLE_PROGRAM_SECONDS,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        (folder / "report.json").write_text(result.stdout)

    folder = made_once(tmp_path_factory, "lowered-from-hub", make)
    return json.loads((folder / "report.json").read_text()), folder / "tts.pte"
