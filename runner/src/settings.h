// The program's settings record (contract.h's keys, written by phaseconv.tts.contract), read and
// checked: every size a runner sizes memory with is positive and bounded, every list non-empty.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "text.h"

namespace phaseconv {

// Bad input, said in one line: the program's caller gets it as an error and its message.
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
  std::vector<int64_t> generate_blocks, prompt_blocks, decode_frames;  // decode_frames: the most first
  std::map<std::string, int64_t> voices;
  std::optional<std::string> default_voice, quantize, quantize_decoder;
  TextOptions text;

  int64_t max_generated_frames(int64_t tokens) const;
  // The method of a ladder (generate_blocks, prompt_blocks) for `position`: the first that reads its
  // block. Throws UserError for a position past the ladder's last block.
  int64_t block_for(const std::vector<int64_t>& ladder, int64_t position) const;
};

// The settings in `text`, the record of the program at `path`; UserError for a record that is not a
// text-to-speech program's, of another version, or whose values are out of range.
Settings parse_settings(const std::string& text, const std::string& path);

}  // namespace phaseconv
