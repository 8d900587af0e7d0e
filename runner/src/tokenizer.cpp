#include "tokenizer.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "charsmap.h"
#include "text.h"

namespace phaseconv {
namespace {

class SentencePiece : public Tokenizer {
 public:
  explicit SentencePiece(const std::string& serialized) {
    sentencepiece::util::Status status;
    try {
      status = processor_.LoadFromSerializedProto(serialized);
    } catch (const std::exception& error) {  // its trie builder throws on pieces it cannot hold (an empty one)
      throw std::runtime_error(std::string("not a sentencepiece model: ") + error.what());
    }
    if (!status.ok()) throw std::runtime_error("not a sentencepiece model: " + status.ToString());
    for (const auto& charsmap : charsmaps_of(serialized)) require_sound_charsmap(charsmap);  // before any text
  }
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    processor_.Encode(text, &ids);
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    return text;
  }
  int vocab_size() const override { return processor_.GetPieceSize(); }
  int unk_id() const override { return processor_.unk_id(); }

 protected:
  sentencepiece::SentencePieceProcessor processor_;
};

// The .json's unigram model as a sentencepiece model (its pieces, scores and normalization), encoded
// by sentencepiece and decoded as tokenizers' Metaspace decoder does (the pieces joined, the first
// one's leading space dropped). Where the two libraries differ, tokenizers' way: a text that ends in
// whitespace ends with a "▁" piece (sentencepiece drops it), and the unknown piece's own text
// ("<unk>", as decoding writes it) reads as that piece: sentencepiece holds it as an extra
// user-defined piece, after the .json's, read back as the unknown piece.
class TokenizersUnigram : public SentencePiece {
 public:
  TokenizersUnigram(const std::string& proto, int pieces, int unk_id, std::string unk_text)
      : SentencePiece(proto), pieces_(pieces), unk_id_(unk_id), unk_text_(std::move(unk_text)) {}

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids = SentencePiece::encode(text);
    for (auto& id : ids) {
      if (id >= pieces_) id = unk_id_;
    }
    std::u32string characters = to_utf32(text);
    int space = processor_.PieceToId("\xe2\x96\x81");
    if (!characters.empty() && is_space(characters.back()) && space != processor_.unk_id()) ids.push_back(space);
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (size_t i = 0; i < ids.size(); ++i) {
      std::string piece = ids[i] == unk_id_ ? unk_text_ : processor_.IdToPiece(static_cast<int>(ids[i]));
      for (size_t at; (at = piece.find("\xe2\x96\x81")) != std::string::npos;) piece.replace(at, 3, " ");
      if (i == 0 && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
      text += piece;
    }
    return text;
  }

  int vocab_size() const override { return pieces_; }
  int unk_id() const override { return unk_id_; }

 private:
  int pieces_, unk_id_;
  std::string unk_text_;
};

// Protocol buffers' wire format, for the few fields of sentencepiece's ModelProto written here.
void varint(std::string& out, uint64_t value) {
  for (; value >= 0x80; value >>= 7) out += static_cast<char>((value & 0x7f) | 0x80);
  out += static_cast<char>(value);
}
void tag(std::string& out, int field, int wire) { varint(out, (static_cast<uint64_t>(field) << 3) | wire); }
void field_varint(std::string& out, int field, int64_t value) {
  tag(out, field, 0);
  varint(out, static_cast<uint64_t>(value));
}
void field_bytes(std::string& out, int field, const std::string& value) {
  tag(out, field, 2);
  varint(out, value.size());
  out += value;
}
void field_float(std::string& out, int field, float value) {
  tag(out, field, 5);
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  out.append(bytes, 4);
}

std::string base64(const std::string& text) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    auto value = alphabet.find(c);
    if (value == std::string::npos) continue;
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    if ((bits += 6) >= 8) out += static_cast<char>((buffer >> (bits -= 8)) & 0xff);
  }
  return out;
}

// The normalizer's precompiled character map, wherever the converter put it in a Sequence.
std::string precompiled_charsmap(const nlohmann::json& normalizer) {
  if (normalizer.is_null()) return "";
  if (normalizer.value("type", "") == "Precompiled") return base64(normalizer.at("precompiled_charsmap"));
  for (const auto& part : normalizer.value("normalizers", nlohmann::json::array())) {
    std::string found = precompiled_charsmap(part);
    if (!found.empty()) return found;
  }
  return "";
}

struct Converted {
  std::string proto, unk_text;
  int pieces, unk_id;
};

Converted model_proto_of(const std::string& json_text) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(json_text);
  } catch (const std::exception& error) {
    throw std::runtime_error(std::string("not a tokenizers .json: ") + error.what());
  }
  const auto& model = json.at("model");
  if (model.value("type", "") != "Unigram") {
    throw std::runtime_error("a tokenizers .json of a " + model.value("type", std::string("?")) +
                             " model; pocket-tts's are unigram models converted from sentencepiece");
  }
  int unk_id = model.value("unk_id", nlohmann::json()).is_null() ? -1 : model.at("unk_id").get<int>();
  const auto& vocab = model.at("vocab");
  if (unk_id < 0 || unk_id >= static_cast<int>(vocab.size())) throw std::runtime_error("its model has no unknown piece");
  std::string proto, unk_text = vocab[unk_id].at(0).get<std::string>();
  auto add = [&](const std::string& text, float score, int type) {
    std::string piece;
    field_bytes(piece, 1, text);
    field_float(piece, 2, score);
    field_varint(piece, 3, type);  // NORMAL 1, UNKNOWN 2, USER_DEFINED 4
    field_bytes(proto, 1, piece);
  };
  for (size_t id = 0; id < vocab.size(); ++id) {
    bool unknown = static_cast<int>(id) == unk_id;
    add(unknown ? "\x01" + unk_text : vocab[id].at(0).get<std::string>(), vocab[id].at(1).get<float>(), unknown ? 2 : 1);
  }
  add(unk_text, 0.0f, 4);  // the unknown piece's text, read as one piece
  std::string trainer;
  field_varint(trainer, 3, 1);  // UNIGRAM
  field_varint(trainer, 4, static_cast<int64_t>(vocab.size()) + 1);
  field_varint(trainer, 35, model.value("byte_fallback", false) ? 1 : 0);
  field_varint(trainer, 40, unk_id);
  for (int field : {41, 42, 43}) field_varint(trainer, field, -1);  // no bos, eos or pad: the .json has none
  field_bytes(proto, 2, trainer);
  std::string normalizer;
  field_bytes(normalizer, 1, "phaseconv_from_tokenizers");
  field_bytes(normalizer, 2, precompiled_charsmap(json.value("normalizer", nlohmann::json())));
  for (int field : {3, 4, 5}) field_varint(normalizer, field, 1);  // dummy prefix, extra whitespace, escapes
  field_bytes(proto, 3, normalizer);
  return {proto, unk_text, static_cast<int>(vocab.size()), unk_id};
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& data) {
  if (kind == "tokenizers") {
    Converted converted = model_proto_of(data);
    return std::make_unique<TokenizersUnigram>(converted.proto, converted.pieces, converted.unk_id, converted.unk_text);
  }
  if (kind == "sentencepiece") return std::make_unique<SentencePiece>(data);
  throw std::runtime_error("unknown tokenizer kind " + kind);
}

std::string tokenizer_kind(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0 ? "tokenizers" : "sentencepiece";
}

}  // namespace phaseconv
