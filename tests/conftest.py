"""What every test file shares."""

import ctypes
import ctypes.util
import gc

import pytest

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
