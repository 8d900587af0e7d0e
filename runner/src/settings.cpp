#include "settings.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "contract.h"

namespace phaseconv {
namespace {

namespace key = contract::key;

template <typename T>
std::optional<T> optional_value(const nlohmann::json& json, const char* name) {
  return json.at(name).is_null() ? std::nullopt : std::optional<T>(json.at(name).get<T>());
}

// Sizes a runner allocates with: positive, and far below what would overflow a product of a few.
void require_size(int64_t value, const char* name, const std::string& path) {
  if (value < 1 || value > (int64_t{1} << 24)) {
    throw UserError(path + ": its settings give " + name + " " + std::to_string(value) + ", not a size");
  }
}

Settings read(const nlohmann::json& json) {
  Settings s;
  s.config = json.at(key::kConfig), s.weights = json.at(key::kWeights);
  s.tokenizer = json.at(key::kTokenizer).is_null() ? "" : json.at(key::kTokenizer).get<std::string>();
  s.voice_cloning = json.at(key::kVoiceCloning), s.voice_start = json.at(key::kVoiceStart);
  s.capacity = json.at(key::kCapacity), s.cache_block = json.at(key::kCacheBlock);
  s.layers = json.at(key::kLayers), s.kv_heads = json.at(key::kKvHeads), s.head_dim = json.at(key::kHeadDim);
  s.dim = json.at(key::kDim), s.latent_dim = json.at(key::kLatentDim), s.n_bins = json.at(key::kNBins);
  s.sample_rate = json.at(key::kSampleRate), s.frame_size = json.at(key::kFrameSize);
  s.frame_rate = json.at(key::kFrameRate), s.temperature = json.at(key::kTemperature);
  s.eos_threshold = json.at(key::kEosThreshold);
  s.noise_clamp = optional_value<double>(json, key::kNoiseClamp);
  s.frames_after_eos = optional_value<int64_t>(json, key::kFramesAfterEos);
  s.min_frames_before_eos = json.at(key::kMinFramesBeforeEos);
  s.max_tokens_per_chunk = json.at(key::kMaxTokensPerChunk), s.max_text_tokens = json.at(key::kMaxTextTokens);
  s.tokens_per_second = json.at(key::kTokensPerSecond), s.gen_seconds_padding = json.at(key::kGenSecondsPadding);
  s.max_voice_seconds = json.at(key::kMaxVoiceSeconds);
  s.prompt_tokens = json.at(key::kPromptTokens), s.voice_positions = json.at(key::kVoicePositions);
  s.pad = json.at(key::kPad);
  s.generate_blocks = json.at(key::kGenerateBlocks).get<std::vector<int64_t>>();
  s.prompt_blocks = json.at(key::kPromptBlocks).get<std::vector<int64_t>>();
  s.decode_frames = json.at(key::kDecodeFrames).get<std::vector<int64_t>>();
  std::sort(s.decode_frames.rbegin(), s.decode_frames.rend());  // the most frames first
  s.voices = json.at(key::kVoices).get<std::map<std::string, int64_t>>();
  s.default_voice = optional_value<std::string>(json, key::kDefaultVoice);
  s.quantize = optional_value<std::string>(json, key::kQuantize);
  s.quantize_decoder = optional_value<std::string>(json, key::kQuantizeDecoder);
  s.text.pad_with_spaces_for_short_inputs = json.at(key::kPadWithSpacesForShortInputs);
  s.text.remove_semicolons = json.at(key::kRemoveSemicolons);
  s.text.append_terminal_punctuation = json.at(key::kAppendTerminalPunctuation);
  s.text.capitalize_first_letter = json.at(key::kCapitalizeFirstLetter);
  for (const auto& [from, to] : json.at(key::kReplaceCharacters).items()) {
    s.text.replace_characters[to_utf32(from)] = to_utf32(to.get<std::string>());
  }
  return s;
}

void check(const Settings& s, const std::string& path) {
  const std::pair<int64_t, const char*> sizes[] = {
      {s.capacity, key::kCapacity},      {s.cache_block, key::kCacheBlock},   {s.layers, key::kLayers},
      {s.kv_heads, key::kKvHeads},       {s.head_dim, key::kHeadDim},         {s.dim, key::kDim},
      {s.latent_dim, key::kLatentDim},   {s.n_bins, key::kNBins},             {s.sample_rate, key::kSampleRate},
      {s.frame_size, key::kFrameSize},   {s.prompt_tokens, key::kPromptTokens},
      {s.voice_positions, key::kVoicePositions}, {s.max_text_tokens, key::kMaxTextTokens},
      {s.max_tokens_per_chunk, key::kMaxTokensPerChunk}};
  for (const auto& [value, name] : sizes) require_size(value, name, path);
  for (const auto* ladder : {&s.generate_blocks, &s.prompt_blocks, &s.decode_frames}) {
    if (ladder->empty() || std::any_of(ladder->begin(), ladder->end(), [](int64_t b) { return b < 0; })) {
      throw UserError(path + ": its settings give an empty or negative ladder of methods");
    }
  }
  if (!std::is_sorted(s.generate_blocks.begin(), s.generate_blocks.end()) ||
      !std::is_sorted(s.prompt_blocks.begin(), s.prompt_blocks.end()) || s.decode_frames.back() != 1) {
    throw UserError(path + ": its settings give ladders out of order, or no one-frame decode");
  }
  const double rates[] = {s.frame_rate, s.tokens_per_second, s.max_voice_seconds};
  if (std::any_of(std::begin(rates), std::end(rates), [](double r) { return !(r > 0 && r < 1e6); }) ||
      !(s.gen_seconds_padding >= 0 && s.gen_seconds_padding < 1e6) || !std::isfinite(s.temperature)) {
    throw UserError(path + ": its settings give a rate or a time out of range");
  }
}

}  // namespace

int64_t Settings::max_generated_frames(int64_t tokens) const {
  return static_cast<int64_t>(std::ceil((tokens / tokens_per_second + gen_seconds_padding) * frame_rate));
}

int64_t Settings::block_for(const std::vector<int64_t>& ladder, int64_t position) const {
  int64_t block = position / cache_block;
  auto found = std::find_if(ladder.begin(), ladder.end(), [&](int64_t b) { return b >= block; });
  if (found == ladder.end()) {
    throw UserError("position " + std::to_string(position) + " lies past the program's cache of " +
                    std::to_string(capacity) + " positions");
  }
  return *found;
}

Settings parse_settings(const std::string& text, const std::string& path) {
  Settings settings;
  try {
    nlohmann::json json = nlohmann::json::parse(text);
    if (!json.is_object() || json.value(key::kKind, std::string()) != contract::kKind) {
      throw UserError(path + " is not a text-to-speech program");
    }
    if (json.value(key::kVersion, 1) != contract::kVersion) {
      throw UserError(path + " was lowered by another phaseconv (program version " +
                      std::to_string(json.value(key::kVersion, 1)) + ", this runner reads " +
                      std::to_string(contract::kVersion) +
                      "): lower it again with `phaseconv lower pocket-tts-tts:CONFIG`");
    }
    settings = read(json);
  } catch (const nlohmann::json::exception& error) {
    throw UserError(path + ": its settings do not read as a text-to-speech program's (" + error.what() + ")");
  } catch (const std::invalid_argument& error) {  // a replacement that is not UTF-8
    throw UserError(path + ": its settings do not read (" + error.what() + ")");
  }
  check(settings, path);
  return settings;
}

}  // namespace phaseconv
