"""phaseconv_tts's C API from Python's ctypes, as a caller in another language binds it; run in a
process of its own (XNNPACK's thread pool is sized once per process):

    python -m tests.tts.c_api LIBRARY PROGRAM TEXT OUT.json

Speaks TEXT at temperature 0 and then checks stop() from another thread and the errors; writes
what it saw to OUT.json (the samples as 16-bit PCM, the statuses, messages and stats)."""

from __future__ import annotations

import ctypes
import json
import math
import sys
import threading

import numpy as np

PCM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_void_p)


class Config(ctypes.Structure):
    _fields_ = [
        ("voice", ctypes.c_char_p),
        ("temperature", ctypes.c_double),
        ("seed", ctypes.c_uint64),
        ("eos_threshold", ctypes.c_double),
        ("frames_after_eos", ctypes.c_int),
    ]


def bind(path: str) -> ctypes.CDLL:
    library = ctypes.CDLL(path)
    library.phaseconv_tts_create.restype = ctypes.c_void_p
    library.phaseconv_tts_create.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    for name in ("load", "stop", "destroy", "sample_rate"):
        getattr(library, f"phaseconv_tts_{name}").argtypes = [ctypes.c_void_p]
    library.phaseconv_tts_sample_rate.restype = ctypes.c_int
    library.phaseconv_tts_error.restype = library.phaseconv_tts_stats_json.restype = ctypes.c_char_p
    library.phaseconv_tts_error.argtypes = library.phaseconv_tts_stats_json.argtypes = [ctypes.c_void_p]
    library.phaseconv_tts_default_config.restype = Config
    library.phaseconv_tts_speak.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.POINTER(Config),
        PCM,
        ctypes.c_void_p,
    ]
    return library


def main(library_path: str, program: str, text: str, out: str) -> None:
    library, seen = bind(library_path), {}
    handle = library.phaseconv_tts_create(program.encode(), 1, None)
    seen["load"] = library.phaseconv_tts_load(handle)
    seen["sample_rate"] = library.phaseconv_tts_sample_rate(handle)
    config = library.phaseconv_tts_default_config()
    seen["defaults"] = [config.temperature, math.isnan(config.eos_threshold), config.frames_after_eos]
    config.temperature = 0.0
    chunks = []

    @PCM
    def keep(samples, count, _):
        chunks.append(np.ctypeslib.as_array(samples, shape=(count,)).copy())
        return 1

    seen["speak"] = library.phaseconv_tts_speak(handle, text.encode(), ctypes.byref(config), keep, None)
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    seen["pcm16"] = np.rint(np.clip(audio, -1, 1) * 32767).astype(int).tolist()
    seen["stats"] = json.loads(library.phaseconv_tts_stats_json(handle) or b"{}")

    frames, after_stop, stopped = [0], [0], threading.Event()

    @PCM
    def stop_at_third(samples, count, _):
        after_stop[0] += stopped.is_set()
        frames[0] += 1
        if frames[0] == 3:
            threading.Thread(target=lambda: (library.phaseconv_tts_stop(handle), stopped.set())).start()
        return 1

    config.eos_threshold = 1e30  # no end of speech: only stop() ends it
    seen["stop"] = library.phaseconv_tts_speak(
        handle, ((text + " ") * 4).encode(), ctypes.byref(config), stop_at_third, None
    )
    seen["frames_after_stop"] = after_stop[0]
    seen["stopped"] = json.loads(library.phaseconv_tts_stats_json(handle))["stopped"]

    config.voice = b"no-such-voice"
    seen["bad_voice"] = library.phaseconv_tts_speak(handle, b"Hi.", ctypes.byref(config), keep, None)
    seen["bad_voice_error"] = library.phaseconv_tts_error(handle).decode()
    seen["no_callback"] = library.phaseconv_tts_speak(handle, b"Hi.", None, PCM(), None)
    library.phaseconv_tts_destroy(handle)
    missing = library.phaseconv_tts_create(b"/no/such/program.pte", 1, None)
    seen["missing"] = library.phaseconv_tts_load(missing)
    seen["missing_error"] = library.phaseconv_tts_error(missing).decode()
    library.phaseconv_tts_destroy(missing)
    with open(out, "w") as file:
        json.dump(seen, file)


if __name__ == "__main__":
    main(*sys.argv[1:])
