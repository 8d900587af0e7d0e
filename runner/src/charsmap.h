// sentencepiece's precompiled character map, checked as sentencepiece will read it. A model's
// normalization rules are a double-array trie and the strings it maps to
// (<trie size, 4 bytes><trie units, 4 bytes each><strings, each ending in \0>); sentencepiece checks
// the trie's size alone, then follows the trie's offsets and the strings' starts wherever they point.
#pragma once

#include <string>
#include <vector>

namespace phaseconv {

// Every precompiled character map a serialized sentencepiece ModelProto holds (its normalizer's and
// denormalizer's); std::runtime_error for bytes that are not protocol buffers.
std::vector<std::string> charsmaps_of(const std::string& model_proto);

// std::runtime_error unless every unit the trie's matching can read, for any input, lies in the trie,
// and every string it gives starts among the strings and ends before they do.
void require_sound_charsmap(const std::string& charsmap);

}  // namespace phaseconv
