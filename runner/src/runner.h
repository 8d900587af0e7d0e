// The text-to-speech program's runner: pocket-tts's generation in the program's methods, in the order
// the contract gives (contract.h, from src/phaseconv/tts/contract.py), the language model on the
// calling thread and the decoder on a second one, consuming latents as they come.
#pragma once

#include <executorch/extension/module/module.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "text.h"
#include "tokenizer.h"
#include "voice.h"

namespace phaseconv {

// Bad input, said in one line: the runner's caller prints it and exits with status 2.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Settings {
  std::string config, weights, tokenizer;
  bool voice_cloning = false, voice_start = false;
  int64_t capacity = 0, cache_block = 0, layers = 0, kv_heads = 0, head_dim = 0, dim = 0, latent_dim = 0;
  int64_t n_bins = 0, sample_rate = 0, frame_size = 0, min_frames_before_eos = 0, max_tokens_per_chunk = 0;
  int64_t max_text_tokens = 0, prompt_tokens = 0, voice_positions = 0, pad = 0;
  std::optional<int64_t> frames_after_eos;
  std::optional<double> noise_clamp;
  double frame_rate = 0, temperature = 0, eos_threshold = 0, tokens_per_second = 0, gen_seconds_padding = 0;
  double max_voice_seconds = 0;
  std::vector<int64_t> generate_blocks, prompt_blocks, decode_frames;
  std::map<std::string, int64_t> voices;
  std::optional<std::string> default_voice, quantize, quantize_decoder;
  TextOptions text;

  int64_t max_generated_frames(int64_t tokens) const;
  // The method of a ladder (generate_blocks, prompt_blocks) for `position`: the first that reads its block.
  int64_t block_for(const std::vector<int64_t>& ladder, int64_t position) const;
};

struct Report {
  int64_t frames = 0, chunks = 0, split_chunks = 0, decode_calls = 0;
  double load_ms = 0, first_audio_ms = 0, voice_ms = 0, reset_ms = 0, total_ms = 0;
  std::string voice = "none";
  std::vector<std::optional<int64_t>> eos_frames;
  std::vector<double> lm_ms, decode_ms, prompt_ms;
};

// Receives each decoded frame's samples; returns false when the audio has nowhere to go (a closed
// pipe), which ends the run.
using FrameSink = std::function<bool(const float* samples, size_t count)>;

class Runner {
 public:
  // The program at `path` (with its tokenizer, or the one at `tokenizer_path`), XNNPACK sized to
  // `threads` threads; throws UserError for a file that is not a text-to-speech program.
  Runner(const std::string& path, int threads, const std::optional<std::string>& tokenizer_path);
  ~Runner();

  const Settings& settings() const { return settings_; }
  // pocket-tts generate's --eos-threshold: the logit past which speech ends (the config's by default)
  void set_eos_threshold(double threshold) { settings_.eos_threshold = threshold; }
  double load_ms() const { return load_ms_; }

  // The voice `--voice` names (none: the program's default): a built-in voice, a .safetensors
  // voice state or an audio file, put in the cache at positions 0 .. V - 1.
  void set_voice(const std::optional<std::string>& voice, Report& report);

  // The characters of `text` the tokenizer reads as its unknown piece.
  std::string unknown_characters(const std::string& text) const;

  // Every chunk of `text`, each frame handed to `sink` as it is decoded. Returns false when the
  // sink refused a frame.
  bool speak(const std::string& text, double temperature, uint64_t seed, const FrameSink& sink, Report& report);

 private:
  struct Chunk {
    std::string text;
    int64_t frames_after_eos;
    bool split;
  };
  std::vector<Chunk> chunks(const std::string& text) const;
  std::vector<std::string> fitting(const std::string& piece) const;
  bool fits(int64_t tokens) const;
  int64_t count_tokens(const std::string& text) const;
  void prompt(const std::vector<float>& embeddings, int64_t count, int64_t first);
  void load_state(const VoiceState& state);
  std::vector<float> noise();
  std::vector<executorch::runtime::EValue> run(executorch::extension::Module& module, const std::string& method,
                                               const std::vector<executorch::runtime::EValue>& inputs);
  class Arenas;
  void load(executorch::extension::Module& module, Arenas& arenas, const std::vector<std::string>& methods,
            bool weight_cache);
  void load_speech();
  std::vector<float> encode_voice(const std::vector<float>& audio);

  // Planned memory, declared before the modules that use it: the state (the cache, the decoder's and
  // the encoder's) one copy for both threads, each thread its own temporaries.
  std::vector<std::vector<uint8_t>> state_;
  std::unique_ptr<Arenas> lm_arenas_, decoder_arenas_;
  std::vector<std::string> lm_methods_, decoder_methods_, encoder_methods_;
  bool speech_loaded_ = false;
  std::string path_;
  std::unique_ptr<executorch::extension::Module> lm_, decoder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Settings settings_;
  int64_t voice_positions_ = 0;
  std::mt19937_64 generator_;
  double temperature_ = 0, load_ms_ = 0;
  class Decoder;
  std::unique_ptr<Decoder> decoder_thread_;
};

}  // namespace phaseconv
