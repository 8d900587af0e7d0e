"""When the runner's decoders call decode_N: a chunk's latents in calls of several frames once the audio
given out is far enough ahead of its playback, never a frame left behind, never one out of order."""

import itertools
import json
import subprocess
from types import SimpleNamespace

import torch
from hypothesis import given
from hypothesis import strategies as st

from phaseconv.tts.decoding import InlineDecoder, decode_size
from tests.cli.test_cli import ROOT

DECODE_SIZE = ROOT / "runner" / "build" / "phaseconv-tts-decode-size"

SIZES = [4, 2, 1]
FRAME_MS = 80.0


@given(st.integers(1, 12), st.floats(-1e3, 1e3), st.booleans())
def test_a_call_takes_a_size_the_program_has_and_waits_only_when_waiting_is_safe(queued, ahead_ms, complete):
    frames = decode_size(queued, SIZES, ahead_ms, FRAME_MS, complete)
    if frames == 0:
        assert queued < 4 and not complete and ahead_ms >= 4 * FRAME_MS
    else:
        assert frames in SIZES and frames <= queued
        assert frames == 4 or queued < 4  # the most frames a call takes, once queued


def test_nothing_queued_is_nothing_to_decode():
    assert decode_size(0, SIZES, 0.0, FRAME_MS, complete=True) == 0


# Every queue length to past the largest call, each ladder's sizes, and the audio ahead by less than,
# exactly and more than one, two and four frames: the rule's boundaries.
CASES = [
    {
        "queued": queued,
        "sizes": sizes,
        "ahead_ms": frames * frame_ms + nudge,
        "frame_ms": frame_ms,
        "complete": complete,
    }
    for queued, sizes, frames, nudge, frame_ms, complete in itertools.product(
        range(10),
        [[4, 2, 1], [2, 1], [1], [8, 4, 1]],
        [-1, 0, 1, 2, 4, 8],
        [-0.5, 0.0, 0.5],
        [80.0, 40.0],
        [False, True],
    )
]


def test_the_cpp_runners_rule_is_the_python_runners():
    """The C++ decoder's decode_size (phaseconv-tts-decode-size, built by `./dev runner`) gives the
    Python one's answer on every case, so the two runners call decode_N alike."""
    assert DECODE_SIZE.is_file(), "build the C++ runner first: ./dev runner"
    lines = "".join(json.dumps(case) + "\n" for case in CASES)
    answers = subprocess.run([str(DECODE_SIZE)], input=lines, capture_output=True, text=True, check=True).stdout
    expected = [decode_size(c["queued"], c["sizes"], c["ahead_ms"], c["frame_ms"], c["complete"]) for c in CASES]
    assert [int(answer) for answer in answers.split()] == expected


class Program:
    """The decode methods of a program, instant: each call's latents recorded."""

    def __init__(self):
        self.settings = SimpleNamespace(decode_frames=[1, 2, 4], frame_size=1920, sample_rate=24000)
        self.calls, self.resets = [], 0

    def decode_frames(self, latents):
        self.calls.append(latents[0, :, 0].tolist())
        return latents[0, :, :1].repeat(1, 1920)

    def reset_decoder(self):
        self.resets += 1


def test_the_inline_decoder_gives_each_frame_in_order_and_batches_once_ahead():
    program, delivered = Program(), []
    decoder = InlineDecoder(program)
    decoder.start(lambda pcm, first, ms, first_of_call: delivered.append((float(pcm[0]), first)))
    for chunk, frames in enumerate([11, 6]):
        decoder.reset()
        for step in range(frames):
            decoder.decode(torch.full((1, 1, 32), chunk * 100.0 + step), first_of_chunk=step == 0)
    decoder.finish()
    expected = [chunk * 100.0 + step for chunk, frames in enumerate([11, 6]) for step in range(frames)]
    assert [value for value, _ in delivered] == expected
    assert [first for _, first in delivered] == [step == 0 for frames in [11, 6] for step in range(frames)]
    sizes = [len(call) for call in program.calls]
    assert sizes[0] == 1 and 4 in sizes  # the first frame alone; later ones four a call, decoded ahead
    assert program.resets == 2
