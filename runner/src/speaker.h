// Generation: pocket-tts's order of calls over the program's methods (contract.h, from
// src/phaseconv/tts/contract.py). The voice into the cache, then per chunk of text its prompt (its last
// call with the first frame) and its frames, the language model on the calling thread and the decoder on
// its own (decoder.h).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "decoder.h"
#include "program.h"
#include "tokenizer.h"
#include "voice.h"

namespace phaseconv {

struct Report {
  int64_t chunks = 0, split_chunks = 0, prompt_tokens = 0;
  double voice_ms = 0, total_ms = 0;
  std::string voice = "none";
  std::vector<std::optional<int64_t>> eos_frames;
  std::vector<double> lm_ms, prompt_ms;
  DecoderReport decoder;
  bool stopped = false;  // stop() ended it
  bool refused = false;  // the sink refused a frame
};

// How an utterance is drawn and where each chunk ends.
struct Sampling {
  double temperature = 0, eos_threshold = 0;
  std::optional<int64_t> frames_after_eos;  // none: the config's, or pocket-tts's guess per chunk
  uint64_t seed = 0;
};

class Speaker {
 public:
  // The program at `path` with its tokenizer (or the one at `tokenizer_path`); UserError for a file
  // that is not a text-to-speech program or a tokenizer that does not fit it.
  Speaker(const std::string& path, const std::optional<std::string>& tokenizer_path);
  ~Speaker();

  const Settings& settings() const { return program_.settings(); }
  double load_ms() const { return program_.load_ms(); }
  void load_speech() { program_.load_speech(); }
  // The voice `voice` names (none: the program's default) in the cache at positions 0 .. V - 1:
  // a built-in voice, a .safetensors voice state or a WAV file; kept until another is set.
  void set_voice(const std::optional<std::string>& voice, Report& report);
  // The voice set last (as set_voice was given it), whether the cache holds it, and how it is said.
  const std::optional<std::string>& voice() const { return voice_; }
  bool voice_set() const { return voice_set_; }
  const std::string& voice_described() const { return described_; }
  void forget_voice() { voice_set_ = false; }
  std::string unknown_characters(const std::string& text) const;

  // Every chunk of `text`, each frame to `sink` as it is decoded, until the text ends, the sink
  // refuses a frame or stop() is called. Throws UserError for a text it cannot read, and
  // std::runtime_error when a method fails (the decoder's thread's failure among them).
  void speak(const std::string& text, const Sampling& sampling, const FrameSink& sink, Report& report);
  // From any thread: speak() returns after the frame in hand.
  void stop();

 private:
  struct Chunk {
    std::string text;
    int64_t frames_after_eos;
    bool split;
  };
  std::vector<Chunk> chunks(const std::string& text, const std::optional<int64_t>& frames_after_eos) const;
  std::vector<std::string> fitting(const std::string& piece) const;
  bool fits(int64_t tokens) const;
  int64_t count_tokens(const std::string& text) const;
  struct Frame {
    std::vector<float> latent;
    float eos_logit;
  };
  // `count` tokens of conditioning into the cache at first, first + 1, ...
  void prompt(const std::vector<float>& embeddings, int64_t count, int64_t first);
  // A chunk's text as prompt() puts it, and its first frame at first + count: the last call's.
  Frame prompt_text(const std::vector<float>& embeddings, int64_t count, int64_t first);
  void check_room(const std::vector<float>& embeddings, int64_t count, int64_t first) const;
  void condition(const std::vector<float>& embeddings, int64_t count, int64_t first);
  void load_state(const VoiceState& state);
  std::vector<float> encode_voice(const std::vector<float>& audio);
  std::vector<float> noise();

  Program program_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<std::string> voice_;
  std::string described_ = "none";
  bool voice_set_ = false;
  int64_t voice_positions_ = 0;
  std::mt19937_64 generator_;
  double temperature_ = 0;
  std::atomic<bool> stopping_{false};
  Decoder decoder_;  // last: its thread runs the program's methods until it is destroyed, first
};

}  // namespace phaseconv
