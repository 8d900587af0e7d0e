#include "readers.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "audio.h"
#include "settings.h"
#include "text.h"
#include "tokenizer.h"
#include "voice.h"

namespace phaseconv {
namespace {

void as_text(const std::string& data, const std::string& tokenizer) {
  static std::unique_ptr<Tokenizer> loaded = load_tokenizer(tokenizer_kind(tokenizer), [&] {
    std::FILE* file = std::fopen(tokenizer.c_str(), "rb");
    if (file == nullptr) throw std::logic_error("the text reader needs a tokenizer file");
    std::string bytes;
    char buffer[1 << 16];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) bytes.append(buffer, n);
    std::fclose(file);
    return bytes;
  }());
  TextOptions options;
  options.replace_characters[U"\u2019"] = U"'";
  try {
    for (const auto& chunk : split_into_best_sentences(*loaded, data, 50, options)) prepare_text_prompt(chunk, options);
  } catch (const std::invalid_argument& error) {  // nothing to say: the runner refuses it so (speaker.cpp)
    throw std::runtime_error(error.what());
  }
}

}  // namespace

bool read_one(const std::string& kind, const std::string& data, const std::string& tokenizer) {
  try {
    if (kind == "voice-state") {
      voice_state_of(data, "the file");
    } else if (kind == "wav") {
      bool truncated = false;  // a longer file is cut to a second: resampling costs what the audio holds
      voice_audio(wav_of(data, "the file"), 24000, 1920, 1.0, truncated);
    } else if (kind == "tokenizers" || kind == "sentencepiece") {
      auto loaded = load_tokenizer(kind, data);
      loaded->decode(loaded->encode("Hello there, 42 times: \xc3\xa9t\xc3\xa9!"));
    } else if (kind == "settings") {
      parse_settings(data, "the file");
    } else if (kind == "text") {
      as_text(data, tokenizer);
    } else {
      throw std::logic_error("no reader " + kind);
    }
    return true;
  } catch (const std::runtime_error&) {  // refused: UserError and the readers' own errors are runtime_errors
    return false;
  } catch (const nlohmann::json::exception&) {  // refused by the JSON reader, a type or key it lacks
    return false;
  }  // anything else (a logic_error: a bound unchecked; bad_alloc: a size believed) is a defect
}

}  // namespace phaseconv
