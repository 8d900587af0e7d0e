#include "charsmap.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace phaseconv {
namespace {

// A double-array unit as darts-clone (sentencepiece's trie) reads it.
bool has_leaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

uint64_t varint(std::string_view& bytes) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (bytes.empty()) break;
    auto byte = static_cast<uint8_t>(bytes.front());
    bytes.remove_prefix(1);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return value;
  }
  throw std::runtime_error("not a protocol buffer");
}

// Each length-delimited value of field `field` in `message`.
std::vector<std::string_view> fields(std::string_view message, uint64_t field) {
  std::vector<std::string_view> found;
  while (!message.empty()) {
    uint64_t tag = varint(message), size = 0;
    switch (tag & 7) {
      case 0: varint(message); continue;
      case 1: size = 8; break;
      case 5: size = 4; break;
      case 2: size = varint(message); break;
      default: throw std::runtime_error("not a protocol buffer");
    }
    if (size > message.size()) throw std::runtime_error("not a protocol buffer");
    if ((tag & 7) == 2 && (tag >> 3) == field) found.push_back(message.substr(0, size));
    message.remove_prefix(size);
  }
  return found;
}

}  // namespace

std::vector<std::string> charsmaps_of(const std::string& model_proto) {
  std::vector<std::string> found;
  for (uint64_t spec : {3, 5}) {  // normalizer_spec, denormalizer_spec: precompiled_charsmap is field 2
    for (auto message : fields(model_proto, spec)) {
      for (auto charsmap : fields(message, 2)) found.emplace_back(charsmap);
    }
  }
  return found;
}

void require_sound_charsmap(const std::string& charsmap) {
  if (charsmap.empty()) return;  // no rules: sentencepiece builds no trie
  uint32_t trie_size = 0;
  if (charsmap.size() > 4) std::memcpy(&trie_size, charsmap.data(), 4);
  if (charsmap.size() <= 4 || trie_size > charsmap.size() - 4 || trie_size < 4) {
    throw std::runtime_error("its normalization rules' trie does not fit in them");
  }
  const size_t units = trie_size / 4;
  const std::string_view strings(charsmap.data() + 4 + trie_size, charsmap.size() - 4 - trie_size);
  auto unit_at = [&](size_t index) {
    uint32_t unit;
    std::memcpy(&unit, charsmap.data() + 4 + index * 4, 4);
    return unit;
  };
  // Matching reads, from a node, the 256 units at its base xor each byte, and for a leaf the value at
  // its base. Any unit can be reached as a node but a value unit (bit 31: its label matches no byte)
  // and the root, which is read whatever it holds: each is checked, reachable or not (an unused unit
  // is zero, and its base itself), which is cheaper than walking the trie and covers every walk.
  for (size_t node = 0; node < units; ++node) {
    uint32_t unit = unit_at(node);
    if (node != 0 && (unit >> 31)) continue;
    size_t base = node ^ offset(unit);
    if ((base | 0xFF) >= units) throw std::runtime_error("its normalization rules' trie points outside it");
    if (!has_leaf(unit)) continue;
    uint32_t start = value(unit_at(base));
    if (start >= strings.size() || strings.find('\0', start) == std::string_view::npos) {
      throw std::runtime_error("its normalization rules map to text outside them");
    }
  }
}

}  // namespace phaseconv
