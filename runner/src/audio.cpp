#include "audio.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <stdexcept>

namespace phaseconv {
namespace {

uint32_t le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint16_t le16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// scipy.signal.firwin(taps, cutoff, window=("kaiser", beta)): a windowed sinc, scaled to 1 at DC.
std::vector<double> firwin_kaiser(int taps, double cutoff, double beta) {
  std::vector<double> h(taps);
  double alpha = 0.5 * (taps - 1), sum = 0;
  for (int n = 0; n < taps; ++n) {
    double m = n - alpha, x = M_PI * (m == 0 ? 1e-20 : cutoff * m);
    double ratio = (n - alpha) / alpha;
    double window = std::cyl_bessel_i(0.0, beta * std::sqrt(1 - ratio * ratio)) / std::cyl_bessel_i(0.0, beta);
    h[n] = cutoff * (std::sin(x) / x) * window;
    sum += h[n];
  }
  for (double& v : h) v /= sum;
  return h;
}

long output_length(long len_h, long in_len, long up, long down) {
  long in_len_copy = in_len + (len_h + ((-len_h % up) + up) % up) / up - 1;
  long nt = in_len_copy * up;
  return nt / down + (nt % down > 0);
}

// scipy.signal.upfirdn (mode constant, zeros) in float32, accumulated in its order: per output
// sample, the inputs oldest first against the phase's taps, flipped.
std::vector<float> upfirdn(const std::vector<float>& h, const std::vector<float>& x, long up, long down) {
  long len_h = static_cast<long>(h.size()), padded = len_h + ((-len_h % up) + up) % up;
  long per_phase = padded / up;
  std::vector<float> flipped(padded, 0.0f);  // phase p, tap k: h[(per_phase - 1 - k) * up + p]
  for (long p = 0; p < up; ++p) {
    for (long k = 0; k < per_phase; ++k) {
      long index = (per_phase - 1 - k) * up + p;
      flipped[p * per_phase + k] = index < len_h ? h[index] : 0.0f;
    }
  }
  long len_x = static_cast<long>(x.size()), len_out = output_length(len_h, len_x, up, down);
  std::vector<float> out(len_out, 0.0f);
  long x_index = 0, y_index = 0, t = 0;
  while (x_index < len_x + per_phase - 1 && y_index < len_out) {
    long h_index = t * per_phase, first = x_index - per_phase + 1;
    for (long i = first; i <= x_index; ++i, ++h_index) {
      float value = (i < 0 || i >= len_x) ? 0.0f : x[i];
      if (i >= 0) out[y_index] = out[y_index] + value * flipped[h_index];
    }
    ++y_index;
    t += down;
    x_index += t / up;
    t %= up;
  }
  return out;
}

}  // namespace

Audio read_wav(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("no such voice file: " + path);
  return wav_of(std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()), path);
}

Audio wav_of(const std::string& data, const std::string& path) {
  if (data.size() < 12 || data.compare(0, 4, "RIFF") != 0 || data.compare(8, 4, "WAVE") != 0) {
    throw std::runtime_error(path + " is not a WAV file (the C++ runner reads WAV voices)");
  }
  int format = 0, channels = 0, bits = 0;
  Audio audio;
  const char* samples = nullptr;
  size_t size = 0;
  for (size_t at = 12; at + 8 <= data.size();) {
    std::string id = data.substr(at, 4);
    size_t length = le32(&data[at + 4]);
    if (at + 8 + length > data.size()) length = data.size() - at - 8;  // a truncated last chunk, read as far as it goes
    if (id == "fmt " && length >= 16) {
      format = le16(&data[at + 8]);
      channels = le16(&data[at + 10]);
      audio.rate = static_cast<int>(le32(&data[at + 12]));
      bits = le16(&data[at + 22]);
      if (format == 0xfffe && length >= 26) format = le16(&data[at + 32]);  // extensible: the subformat
    } else if (id == "data") {
      samples = &data[at + 8];
      size = length;
    }
    at += 8 + length + (length & 1);
  }
  bool pcm = format == 1 && (bits == 8 || bits == 16 || bits == 24 || bits == 32);
  if (samples == nullptr || channels < 1 || audio.rate < 1 || !(pcm || (format == 3 && bits == 32))) {
    throw std::runtime_error(path + " is not a WAV file of PCM or float samples");
  }
  if (audio.rate > kMaxSampleRate) {  // resampling's filter grows with the rate: bounded, as its memory
    throw std::runtime_error(path + " has a sample rate of " + std::to_string(audio.rate) + " Hz; voices are read up to " +
                             std::to_string(kMaxSampleRate) + " Hz");
  }
  size_t width = bits / 8, frames = size / (width * channels);
  if (frames == 0) throw std::runtime_error(path + " holds no audio");
  audio.samples.resize(frames);
  for (size_t f = 0; f < frames; ++f) {
    float sum = 0;
    for (int c = 0; c < channels; ++c) {
      const char* p = samples + (f * channels + c) * width;
      float v;
      if (format == 3) {
        std::memcpy(&v, p, 4);
      } else if (bits == 8) {
        v = (static_cast<unsigned char>(*p) - 128) / 128.0f;
      } else if (bits == 16) {
        v = static_cast<int16_t>(le16(p)) / 32768.0f;
      } else if (bits == 24) {
        int32_t s = (static_cast<unsigned char>(p[0]) | (static_cast<unsigned char>(p[1]) << 8) |
                     (static_cast<signed char>(p[2]) * 65536));
        v = s / 8388608.0f;
      } else {
        v = static_cast<float>(static_cast<int32_t>(le32(p)) / 2147483648.0);
      }
      sum += v;
    }
    audio.samples[f] = sum / channels;
  }
  return audio;
}

std::vector<float> resample_poly(const std::vector<float>& x, int up, int down) {
  int g = std::gcd(up, down);
  up /= g, down /= g;
  if (up == 1 && down == 1) return x;
  if (std::max(up, down) > kMaxResamplingFactor) {
    throw std::runtime_error("resampling by " + std::to_string(up) + "/" + std::to_string(down) +
                             " takes too long a filter: give the voice at a common sample rate (16, 24, 44.1 or 48 kHz)");
  }
  long n_in = static_cast<long>(x.size()), n_out = n_in * up / down + ((n_in * up) % down != 0);
  int max_rate = std::max(up, down), half_len = 10 * max_rate;
  std::vector<double> taps = firwin_kaiser(2 * half_len + 1, 1.0 / max_rate, 5.0);
  long n_pre_pad = down - half_len % down, n_post_pad = 0, n_pre_remove = (half_len + n_pre_pad) / down;
  while (output_length(static_cast<long>(taps.size()) + n_pre_pad + n_post_pad, n_in, up, down) < n_out + n_pre_remove) {
    ++n_post_pad;
  }
  std::vector<float> h(n_pre_pad, 0.0f);
  for (double tap : taps) h.push_back(static_cast<float>(tap) * static_cast<float>(up));  // h *= up, in x's dtype
  h.resize(h.size() + n_post_pad, 0.0f);
  std::vector<float> y = upfirdn(h, x, up, down);
  return {y.begin() + n_pre_remove, y.begin() + n_pre_remove + n_out};
}

std::vector<float> convert_audio(const std::vector<float>& x, int from_rate, int to_rate) {
  if (from_rate == to_rate) return x;
  int g = std::gcd(from_rate, to_rate);
  return resample_poly(x, to_rate / g, from_rate / g);
}

std::vector<float> linspace(float start, float end, int steps) {
  std::vector<float> out(steps);
  if (steps == 1) return {start};
  float step = (end - start) / static_cast<float>(steps - 1);
  int halfway = steps / 2;
  for (int i = 0; i < steps; ++i) {
    out[i] = i < halfway ? start + step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
  }
  return out;
}

std::vector<float> end_on_pause(std::vector<float> wav, int rate) {
  int frame = std::max(1, static_cast<int>(0.02 * rate));
  size_t n = wav.size() / frame;
  if (n == 0) return wav;
  std::vector<float> db(n);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int k = 0; k < frame; ++k) sum += static_cast<double>(wav[i * frame + k]) * wav[i * frame + k];
    float rms = std::sqrt(static_cast<float>(sum / frame));
    db[i] = 20.0f * std::log10(rms + 1e-12f);
  }
  float loudest = *std::max_element(db.begin(), db.end());
  size_t last = 0;
  for (size_t i = 0; i < n; ++i) {
    if (db[i] > loudest - 35.0f) last = i;
  }
  size_t end = (last + 1) * frame;
  wav.resize(end);
  size_t fade = std::min(static_cast<size_t>(0.02 * rate), end);
  std::vector<float> ramp = linspace(1.0f, 0.0f, static_cast<int>(fade));
  for (size_t i = 0; i < fade; ++i) wav[end - fade + i] *= ramp[i];
  wav.resize(end + static_cast<size_t>(0.08 * rate), 0.0f);
  return wav;
}

std::string to_pcm16(const float* samples, size_t count) {
  std::string out(count * 2, '\0');
  std::fesetround(FE_TONEAREST);
  for (size_t i = 0; i < count; ++i) {
    float v = std::nearbyint(std::clamp(samples[i], -1.0f, 1.0f) * 32767.0f);
    auto s = static_cast<int16_t>(v);
    std::memcpy(&out[2 * i], &s, 2);
  }
  return out;
}

std::string wav_bytes(const std::string& pcm, int rate) {
  auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
  auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
  std::string header = "RIFF" + u32(static_cast<uint32_t>(36 + pcm.size())) + "WAVEfmt " + u32(16) + u16(1) + u16(1) +
                       u32(rate) + u32(rate * 2) + u16(2) + u16(16) + "data" + u32(static_cast<uint32_t>(pcm.size()));
  return header + pcm;
}

}  // namespace phaseconv
