"""The C++ runner's readers on hostile files: each voice state, WAV, tokenizer, settings record and
text a file from outside reaches is read or refused with an error, never read past its bytes. Through
phaseconv-tts-read (built by `./dev runner`), the readers the library and the fuzz targets share; the
files fuzzing found (runner/fuzz/regressions) are replayed here."""

import json
import struct
import subprocess

import numpy as np
import pytest

from tests.cli.test_cli import ROOT

READ = ROOT / "runner" / "build" / "phaseconv-tts-read"
REGRESSIONS = ROOT / "runner" / "fuzz" / "regressions"
LAYER = "transformer.layers.{}.self_attn/"
# The kinds of file phaseconv-tts-read and the fuzz targets take.
KINDS = ["voice-state", "wav", "tokenizers", "sentencepiece", "settings", "text"]


def safetensors(entries: dict, body: bytes, header_size: int | None = None) -> bytes:
    """A .safetensors file: 8 bytes of header length, the header as JSON, the tensors' bytes."""
    header = json.dumps(entries).encode()
    return struct.pack("<Q", len(header) if header_size is None else header_size) + header + body


def voice_state(layers=2, positions=3, length=5, heads=2, dim=4, edit=lambda entries, body: None) -> bytes:
    """A voice state as pocket-tts exports one (per layer a float32 cache [2, 1, length, heads, dim]
    and an int64 offset: `positions`, or each layer's), with `edit` applied to its header entries."""
    entries, body = {}, b""
    filled = positions if isinstance(positions, list) else [positions] * layers
    for layer in range(layers):
        cache = np.random.default_rng(layer).standard_normal((2, 1, length, heads, dim)).astype("<f4").tobytes()
        entries[LAYER.format(layer) + "cache"] = {
            "dtype": "F32",
            "shape": [2, 1, length, heads, dim],
            "data_offsets": [len(body), len(body) + len(cache)],
        }
        body += cache
        entries[LAYER.format(layer) + "offset"] = {
            "dtype": "I64",
            "shape": [1],
            "data_offsets": [len(body), len(body) + 8],
        }
        body += struct.pack("<q", filled[layer])
    edit(entries, body)
    return safetensors(entries, body)


def cache(entries, layer=0):
    return entries[LAYER.format(layer) + "cache"]


def offset(entries, layer=0):
    return entries[LAYER.format(layer) + "offset"]


def read(kind, *paths, tokenizer=None):
    """Each file's verdict, "read" or "refused"; a crash or an unexpected exception fails here."""
    command = [str(READ), kind, *map(str, paths), *(["--tokenizer", str(tokenizer)] if tokenizer else [])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{kind} reader crashed (exit {result.returncode}): {result.stderr}"
    return [line.split(" ", 1)[0] for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def built():
    assert READ.is_file(), "build the C++ runner first: ./dev runner"


HOSTILE_STATES = {
    # the file the issue found: an offset far past the end of the file
    "offset-past-file": lambda e, b: offset(e).update(data_offsets=[10**12, 10**12 + 8]),
    "cache-past-file": lambda e, b: cache(e).update(data_offsets=[0, len(b) + 4]),
    "cache-longer-than-bytes": lambda e, b: cache(e).update(shape=[2, 1, 50, 2, 4]),
    "cache-shorter-than-bytes": lambda e, b: cache(e).update(shape=[2, 1, 4, 2, 4]),
    "negative-size": lambda e, b: cache(e).update(shape=[2, 1, -5, 2, 4]),
    "overflowing-shape": lambda e, b: cache(e).update(shape=[2, 1, 2**40, 2**40, 2**40]),
    "offsets-reversed": lambda e, b: cache(e).update(data_offsets=[160, 0]),
    "three-offsets": lambda e, b: cache(e).update(data_offsets=[0, 160, 170]),
    "no-offsets": lambda e, b: cache(e).pop("data_offsets"),
    "shape-not-a-list": lambda e, b: cache(e).update(shape="2x1x5"),
    "cache-half-floats": lambda e, b: cache(e).update(dtype="F16"),
    "cache-of-four-dims": lambda e, b: cache(e).update(shape=[2, 5, 2, 4], data_offsets=[0, 320]),
    "offset-a-float": lambda e, b: offset(e).update(dtype="F32", data_offsets=[320, 324], shape=[1]),
    "offset-two-values": lambda e, b: offset(e).update(shape=[2], data_offsets=[320, 336]),
    "layers-of-other-widths": lambda e, b: cache(e, 1).update(shape=[2, 1, 10, 1, 4]),
    "entry-not-an-object": lambda e, b: e.update({LAYER.format(0) + "cache": [1, 2]}),
    "no-offset": lambda e, b: e.pop(LAYER.format(1) + "offset"),
}


@pytest.mark.parametrize("name", HOSTILE_STATES)
def test_a_voice_state_whose_header_lies_is_refused(built, tmp_path, name):
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(voice_state(edit=HOSTILE_STATES[name]))
    assert read("voice-state", path) == ["refused"]


@pytest.mark.parametrize("positions", [-1, 6, 2**62])
def test_a_voice_state_filled_past_its_cache_is_refused(built, tmp_path, positions):
    path = tmp_path / "state.safetensors"
    path.write_bytes(voice_state(positions=positions))
    assert read("voice-state", path) == ["refused"]


def test_a_voice_state_whose_layers_disagree_is_refused(built, tmp_path):
    path = tmp_path / "state.safetensors"
    path.write_bytes(voice_state(positions=[3, 2]))
    assert read("voice-state", path) == ["refused"]


def test_a_well_formed_voice_state_is_read_and_its_truncations_refused(built, tmp_path):
    """The control: the same writer's honest file reads; every prefix of it is refused."""
    data = voice_state()
    whole = tmp_path / "whole.safetensors"
    whole.write_bytes(data)
    cuts = []
    for size in range(0, len(data), 7):
        cuts.append(tmp_path / f"cut_{size}.safetensors")
        cuts[-1].write_bytes(data[:size])
    huge_header = tmp_path / "huge_header.safetensors"
    huge_header.write_bytes(struct.pack("<Q", 2**63) + data[8:])
    assert read("voice-state", whole, *cuts, huge_header) == ["read"] + ["refused"] * (len(cuts) + 1)


def wav(channels=1, rate=16000, width=2, frames=800, fmt=1, edit=None) -> bytes:
    """A RIFF WAV file; `edit(fields)` changes the fmt chunk's fields or the data size before writing."""
    data = np.zeros(frames * channels * width, dtype=np.uint8).tobytes()
    fields = {"format": fmt, "channels": channels, "rate": rate, "width": width, "data_size": len(data)}
    if edit:
        edit(fields)
    fmt_chunk = struct.pack(
        "<HHIIHH",
        fields["format"],
        fields["channels"],
        fields["rate"],
        fields["rate"] * fields["channels"] * fields["width"] & 0xFFFFFFFF,
        fields["channels"] * fields["width"] & 0xFFFF,
        fields["width"] * 8,
    )
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt_chunk + b"data" + struct.pack("<I", fields["data_size"])
    return b"RIFF" + struct.pack("<I", len(body) + len(data)) + body + data


HOSTILE_WAVS = {  # the edit, and what the reader does: a data chunk cut short is read as far as it goes
    "data-past-file": (lambda f: f.update(data_size=2**31), "read"),
    "no-channels": (lambda f: f.update(channels=0), "refused"),
    "rate-zero": (lambda f: f.update(rate=0), "refused"),
    "rate-huge": (lambda f: f.update(rate=2**31 - 1), "refused"),
    "rate-negative": (lambda f: f.update(rate=2**31), "refused"),
    "mu-law": (lambda f: f.update(format=7), "refused"),
    "width-huge": (lambda f: f.update(width=4096), "refused"),
    "compressed": (lambda f: f.update(format=2), "refused"),
    "more-channels-than-samples": (lambda f: f.update(channels=65535), "refused"),
    # 24000/2354 reduces to 12000/1177: a filter of 240,001 taps (found by fuzzing as a slow input)
    "rate-needing-a-long-filter": (lambda f: f.update(rate=2354), "refused"),
    "rate-of-cd-audio": (lambda f: f.update(rate=44100), "read"),
}


@pytest.mark.parametrize("name", HOSTILE_WAVS)
def test_a_wav_whose_header_lies_is_read_within_its_bytes_or_refused(built, tmp_path, name):
    edit, verdict = HOSTILE_WAVS[name]
    path = tmp_path / f"{name}.wav"
    path.write_bytes(wav(edit=edit))
    assert read("wav", path) == [verdict]


def test_a_well_formed_wav_is_read_and_its_truncations_refused(built, tmp_path):
    data = wav(channels=2, rate=44100, frames=300)
    whole = tmp_path / "whole.wav"
    whole.write_bytes(data)
    cuts = []
    for size in (0, 4, 12, 20, 30, 40):
        cuts.append(tmp_path / f"cut_{size}.wav")
        cuts[-1].write_bytes(data[:size])
    assert read("wav", whole, *cuts) == ["read"] + ["refused"] * len(cuts)


@pytest.mark.parametrize("kind", KINDS)
def test_every_file_fuzzing_found_is_read_or_refused(built, tmp_path, kind):
    """The regression corpus: each input that once crashed a reader or tripped a sanitizer."""
    found = sorted((REGRESSIONS / kind).glob("*")) if (REGRESSIONS / kind).is_dir() else []
    if not found:
        pytest.skip(f"fuzzing has found nothing in the {kind} reader")
    tokenizer = None
    if kind == "text":
        from phaseconv.tts.stand_ins import stand_in_tokenizer

        tokenizer = stand_in_tokenizer(tmp_path / "tokenizer.model", 4000)
    assert set(read(kind, *found, tokenizer=tokenizer)) <= {"read", "refused"}


def test_every_seed_file_of_the_fuzz_corpus_is_read(built, tmp_path):
    """runner/fuzz/corpus.py makes the seeds `./dev fuzz` mutates: real files, each one the readers take."""
    import sys

    subprocess.run(
        [sys.executable, str(ROOT / "runner" / "fuzz" / "corpus.py"), str(tmp_path)], check=True, timeout=600
    )
    for kind in KINDS:
        seeds = sorted((tmp_path / kind).iterdir())
        assert seeds, kind
        assert read(kind, *seeds, tokenizer=tmp_path / "tokenizer.model") == ["read"] * len(seeds), kind
