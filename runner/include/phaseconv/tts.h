// phaseconv's text-to-speech runner as a library: a program from `phaseconv lower pocket-tts-tts:CONFIG`
// spoken frame by frame, in the shape of ExecuTorch's LLM runners (extension/llm/runner's IRunner:
// load, is_loaded, generate with a callback for each piece of output and one for the stats, stop,
// reset). No exception leaves it: each call returns an ExecuTorch Error, and error_message() says
// what went wrong in one line. A Runner is used from one thread at a time, but for stop().
#pragma once

#include <executorch/runtime/core/error.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tts_export.h"

namespace phaseconv::tts {

using executorch::runtime::Error;

struct RunnerOptions {
  int threads = 1;                       // XNNPACK's threads for the language model (once per process)
  std::optional<std::string> tokenizer;  // a tokenizer file (.model or .json) instead of the program's own
};

struct GenerationConfig {
  // a built-in voice's name, a .safetensors voice state (pocket-tts export-voice) or a WAV file to clone
  // (its first 30 s); default: the program's default voice. Kept from one generate() to the next.
  std::optional<std::string> voice;
  std::optional<double> temperature;    // the noise's scale; 0: deterministic; default: the config's
  uint64_t seed = 0;                    // the same seed, the same audio
  std::optional<double> eos_threshold;  // the end-of-speech logit past which a chunk ends; default: the config's
  // frames spoken after the end of speech, per chunk; default: the config's (or pocket-tts's guess from
  // the chunk's length)
  std::optional<int64_t> frames_after_eos;
};

// What the program is, once loaded.
struct ProgramInfo {
  std::string config, weights;
  int64_t sample_rate = 0, samples_per_frame = 0, capacity = 0;
  double temperature = 0, eos_threshold = 0;
  std::vector<std::string> voices;
  std::optional<std::string> default_voice;
  std::string lm_precision, decoder_precision;  // "fp32", "8da4w", "int8", ...
  bool voice_cloning = false;
};

// One utterance, measured. Times in milliseconds from the call of generate(); to_json() is the
// summary phaseconv-tts --json writes, observer_line() the line ExecuTorch's runners print.
struct PHASECONV_TTS_API Stats {
  int64_t frames = 0, chunks = 0, split_chunks = 0, decode_calls = 0, prompt_tokens = 0;
  int64_t sample_rate = 0, samples_per_frame = 0, threads = 1;
  double load_ms = 0, voice_ms = 0, first_audio_ms = 0, reset_ms = 0, total_ms = 0;
  std::optional<double> lm_median_ms, decode_median_ms, prompt_median_ms;
  std::string voice = "none", lm_precision = "fp32", decoder_precision = "fp32";
  std::vector<std::optional<int64_t>> eos_frames;
  bool stopped = false;

  double audio_seconds() const;
  double real_time_factor() const;
  std::string to_json() const;
};
PHASECONV_TTS_API std::string observer_line(const Stats& stats);

// Each frame's samples (mono float in [-1, 1], at ProgramInfo::sample_rate); return false to end the
// utterance (generate() then returns Error::Ok, with fewer frames).
using PcmCallback = std::function<bool(const float* samples, size_t count)>;
using StatsCallback = std::function<void(const Stats&)>;

class PHASECONV_TTS_API Runner {
 public:
  explicit Runner(std::string program, RunnerOptions options = {});
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // The program and its tokenizer, then the speech methods. NotFound: no such file; InvalidProgram:
  // not a text-to-speech program, or a tokenizer that does not fit it; InvalidArgument: bad options.
  Error load();
  bool is_loaded() const;
  const ProgramInfo& info() const;  // after load()

  // Every chunk of `text`, each frame to `on_pcm` as it is decoded, then the stats to `on_stats`.
  // Loads first if need be. InvalidArgument: a text, voice or voice file it cannot read; Internal: a
  // method failed (the decoder's thread's failure among them: the next generate() speaks normally).
  Error generate(const std::string& text, const GenerationConfig& config, const PcmCallback& on_pcm,
                 const StatsCallback& on_stats = {});
  // From any thread: generate() returns after the frame in hand, with Error::Ok and stats.stopped.
  void stop();
  // The voice forgotten: the next generate() puts its voice in the cache again.
  void reset();

  // The last error's message (empty after a call that succeeded).
  const std::string& error_message() const;
  // The characters of `text` the tokenizer reads as its unknown piece (after load()).
  std::string unknown_characters(const std::string& text) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace phaseconv::tts
