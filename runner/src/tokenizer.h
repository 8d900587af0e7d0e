// pocket-tts's two tokenizer kinds: a sentencepiece .model, and a tokenizers .json converted from one
// (a unigram model: the same ids), each read by sentencepiece's library.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace phaseconv {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual int unk_id() const = 0;
};

// `kind` is "sentencepiece" (a serialized .model) or "tokenizers" (a .json's text); throws
// std::runtime_error naming what is wrong with the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& data);

// The kind of a tokenizer file, by its name: .json is tokenizers', anything else sentencepiece's.
std::string tokenizer_kind(const std::string& path);

}  // namespace phaseconv
