// Voices as pocket-tts takes them (phaseconv.tts.voices): a voice state read from a .safetensors
// file that `pocket-tts export-voice` writes, or the audio of a voice prompt to clone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audio.h"

namespace phaseconv {

// The language model's cache after a voice prompt: per layer, keys then values at `positions`
// positions, laid out [layers, 2, positions, kv_heads, head_dim] as load_voice takes it.
struct VoiceState {
  std::vector<float> values;
  int64_t layers = 0, positions = 0, kv_heads = 0, head_dim = 0;
};

// A .safetensors voice state (keys `transformer.layers.N.self_attn/cache` and `/offset`, or the
// older `/current_end`); throws std::runtime_error naming what is missing.
VoiceState read_voice_state(const std::string& path);
// The same, from the file's bytes (`path` names it in messages).
VoiceState voice_state_of(const std::string& data, const std::string& path);

// A voice prompt as pocket-tts reads one: mono, its first `max_seconds`, resampled to `rate`, ended
// on a pause, zeros to whole frames of `frame_size`. `truncated`: whether it was longer.
std::vector<float> read_voice_audio(const std::string& path, int rate, int frame_size, double max_seconds,
                                    bool& truncated);
// The same, of audio already read.
std::vector<float> voice_audio(Audio audio, int rate, int frame_size, double max_seconds, bool& truncated);

}  // namespace phaseconv
