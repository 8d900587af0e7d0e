// Audio as pocket-tts reads and writes it: a voice prompt read from a WAV file (mono, resampled by
// scipy's resample_poly, ended on a pause), and 16-bit mono WAV or PCM out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace phaseconv {

struct Audio {
  std::vector<float> samples;  // mono, in [-1, 1]
  int rate = 0;
};

// The highest sample rate a voice is read at (studio audio's).
constexpr int kMaxSampleRate = 384000;
// The largest up or down factor resampling takes, once reduced: its filter has 20 taps per unit of it,
// so an odd rate would cost seconds to resample (every rate in common use reduces far below it).
constexpr int kMaxResamplingFactor = 4096;

// A WAV file (PCM of 8, 16, 24 or 32 bits, or 32-bit float), its channels averaged, as pocket-tts's
// audio_read gives it; throws std::runtime_error for anything else.
Audio read_wav(const std::string& path);
// The same, from the file's bytes (`path` names it in messages).
Audio wav_of(const std::string& data, const std::string& path);

// scipy.signal.resample_poly(x, up, down) with its default Kaiser window (beta 5) and zero padding;
// std::runtime_error when up or down, reduced, is over kMaxResamplingFactor.
std::vector<float> resample_poly(const std::vector<float>& x, int up, int down);

// pocket-tts's convert_audio to `rate` (the resampling above, by the rates' greatest common divisor).
std::vector<float> convert_audio(const std::vector<float>& x, int from_rate, int to_rate);

// pocket-tts's end_on_pause: the trailing silence cut, the last 20 ms faded out, 80 ms of zeros added.
std::vector<float> end_on_pause(std::vector<float> wav, int rate);

// torch.linspace(start, end, steps) in float32, as torch computes it.
std::vector<float> linspace(float start, float end, int steps);

// float samples in [-1, 1] to 16-bit little-endian PCM: clamp, scale by 32767, round half to even.
std::string to_pcm16(const float* samples, size_t count);

// A mono 16-bit WAV file's bytes around `pcm`.
std::string wav_bytes(const std::string& pcm, int rate);

}  // namespace phaseconv
