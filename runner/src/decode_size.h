// When the decoder's thread calls decode_N: the rule phaseconv.tts.decoding.decode_size gives the
// Python runner, held against it by tests/tts/test_decoding.py through phaseconv-tts-decode-size.
#pragma once

#include <cstdint>
#include <vector>

namespace phaseconv {

// How many of `queued` latents the next decode call takes (0: wait for more): the most of `sizes` (most
// first) once that many are queued; until then, while the audio given out plays for that many frames
// more (`ahead_ms`) and the chunk has more to come (not `complete`), 0; else the most the queue holds.
int64_t decode_size(int64_t queued, const std::vector<int64_t>& sizes, double ahead_ms, double frame_ms,
                    bool complete);

}  // namespace phaseconv
