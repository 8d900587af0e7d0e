"""XNNPACK's backend options, set from Python as an app sets them from C++.

ExecuTorch 1.5.1's Python bindings have no call for backend options, but its runtime library
exports the one an app makes, `executorch::runtime::set_option("XnnpackBackend", options)` (and
`get_option`). They are called here through ctypes, with `BackendOption` laid out as
`runtime/backend/options.h` declares it: a 64-byte key, then `std::variant<bool, int,
std::array<char, 256>>`: 256 bytes of storage aligned as an int, then a one-byte index of the
alternative (324 bytes in all).
An option applies to the programs loaded after it is set.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

from phaseconv.errors import PhaseconvError

XNNPACK = b"XnnpackBackend"
# Packed weights shared by every operator (and every loaded program) that reads the same constant;
# off in the pip build. Without it each operator packs a private copy of its weight.
WEIGHT_CACHE = "weight_cache_enabled"
_BOOL, _INT = 0, 1  # the variant's alternatives


class _BackendOption(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char * 64), ("value", ctypes.c_int32 * 64), ("index", ctypes.c_uint8 * 4)]


@cache
def _calls():
    from executorch.extension.pybindings import portable_lib

    library = ctypes.CDLL(str(Path(portable_lib.__file__).parent.parent.parent / "lib" / "libexecutorch.so"))
    calls = {}
    for name, mangled in (
        ("set", "_ZN10executorch7runtime10set_optionEPKcNS0_4SpanINS0_13BackendOptionEEE"),
        ("get", "_ZN10executorch7runtime10get_optionEPKcNS0_4SpanINS0_13BackendOptionEEE"),
    ):
        call = getattr(library, mangled)
        # (backend name, Span{data, length}) -> Error; a 16-byte Span is passed as two words.
        call.argtypes = [ctypes.c_char_p, ctypes.POINTER(_BackendOption), ctypes.c_size_t]
        call.restype = ctypes.c_uint32
        calls[name] = call
    return calls


def set_xnnpack_option(key: str, value: bool | int) -> None:
    option = _BackendOption(key=key.encode())
    option.value[0], option.index[0] = int(value), _BOOL if isinstance(value, bool) else _INT
    error = _calls()["set"](XNNPACK, ctypes.byref(option), 1)
    if error:
        raise PhaseconvError(f"ExecuTorch refused XNNPACK option {key}={value!r} (error {error:#x})")


def xnnpack_option(key: str) -> bool | int:
    option = _BackendOption(key=key.encode())
    error = _calls()["get"](XNNPACK, ctypes.byref(option), 1)
    if error:
        raise PhaseconvError(f"ExecuTorch has no XNNPACK option {key} (error {error:#x})")
    return bool(option.value[0] & 0xFF) if option.index[0] == _BOOL else option.value[0]
