#include "text.h"

#include <cwctype>
#include <stdexcept>
#include <unordered_set>

namespace phaseconv {
namespace {

// Python's str.isdigit() for the digits a text may carry: decimal digits of the common scripts,
// superscripts and fullwidth digits.
bool is_digit(char32_t c) {
  static const char32_t zeros[] = {0x30,   0x660,  0x6f0,  0x7c0,  0x966,  0x9e6,  0xa66,  0xae6,  0xb66,
                                   0xbe6,  0xc66,  0xce6,  0xd66,  0xe50,  0xed0,  0xf20,  0x1040, 0x17e0,
                                   0x1810, 0xff10, 0x2080, 0x2070};
  for (char32_t zero : zeros) {
    if (c >= zero && c <= zero + 9 && !(zero == 0x2070 && (c == 0x2071 || c == 0x2072 || c == 0x2073))) {
      return true;
    }
  }
  return c == 0xb2 || c == 0xb3 || c == 0xb9;
}

// Python's str.upper() of one character: the full case mappings that grow a character, else towupper.
std::u32string upper(char32_t c) {
  switch (c) {
    case 0xdf: return U"SS";
    case 0x149: return U"\u02bcN";
    case 0xfb00: return U"FF";
    case 0xfb01: return U"FI";
    case 0xfb02: return U"FL";
    case 0xfb03: return U"FFI";
    case 0xfb04: return U"FFL";
    case 0xfb05:
    case 0xfb06: return U"ST";
    default: return std::u32string(1, static_cast<char32_t>(std::towupper(static_cast<wint_t>(c))));
  }
}

bool is_upper(char32_t c) { return std::iswupper(static_cast<wint_t>(c)) != 0; }

std::u32string strip(const std::u32string& text) {
  size_t start = 0, end = text.size();
  while (start < end && is_space(text[start])) ++start;
  while (end > start && is_space(text[end - 1])) --end;
  return text.substr(start, end - start);
}

std::u32string rstrip(const std::u32string& text, const std::u32string& characters) {
  size_t end = text.size();
  while (end > 0 && characters.find(text[end - 1]) != std::u32string::npos) --end;
  return text.substr(0, end);
}

std::vector<std::u32string> split(const std::u32string& text) {
  std::vector<std::u32string> words;
  std::u32string word;
  for (char32_t c : text) {
    if (is_space(c)) {
      if (!word.empty()) words.push_back(word), word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

std::u32string join(const std::vector<std::u32string>& words) {
  std::u32string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? U" " : U"") + words[i];
  return out;
}

// str.replace(old, new): every non-overlapping occurrence, from the left.
std::u32string replace(const std::u32string& text, const std::u32string& old, const std::u32string& with) {
  std::u32string out;
  size_t at = 0;
  for (size_t found; (found = text.find(old, at)) != std::u32string::npos; at = found + old.size()) {
    out += text.substr(at, found - at) + with;
  }
  return out + text.substr(at);
}

// re.sub(r"([.!?\u2026])\s*[,;:]", r"\1", text)
std::u32string drop_weak_after_sentence_end(const std::u32string& text) {
  static const std::u32string ends = U".!?\u2026", weak = U",;:";
  std::u32string out;
  for (size_t i = 0; i < text.size(); ++i) {
    out += text[i];
    if (ends.find(text[i]) == std::u32string::npos) continue;
    size_t next = i + 1;
    while (next < text.size() && is_space(text[next])) ++next;
    if (next < text.size() && weak.find(text[next]) != std::u32string::npos) i = next;
  }
  return out;
}

const std::u32string kTerminal = U".!?\u2026";
const std::u32string kWeak = U",;:-\u2013\u2014";
const std::u32string kClosers = U"\"'\u201d\u2019)]\u00bb";

std::u32string ensure_terminal_punctuation(const std::u32string& text) {
  std::u32string core = rstrip(text, kClosers + U" ");
  std::u32string closers = strip(text.substr(core.size()));
  if (core.empty() || kTerminal.find(core.back()) != std::u32string::npos) return text;
  if (kWeak.find(core.back()) != std::u32string::npos) return rstrip(core, kWeak + U" ") + U"." + closers;
  return text + U".";
}

std::vector<size_t> boundary_indices(
    const std::vector<int64_t>& tokens, const std::unordered_set<int64_t>& boundary, const Tokenizer* tokenizer) {
  std::vector<size_t> indices{0};
  bool previous_was_boundary = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (boundary.count(tokens[i])) {
      previous_was_boundary = true;
      continue;
    }
    if (previous_was_boundary) {
      bool decimal = false;
      if (tokenizer != nullptr) {  // _is_decimal_period_boundary
        std::u32string prefix = to_utf32(tokenizer->decode({tokens.begin(), tokens.begin() + i}));
        std::u32string suffix = to_utf32(tokenizer->decode({tokens.begin() + i, tokens.end()}));
        decimal = prefix.size() >= 2 && prefix.back() == U'.' && is_digit(prefix[prefix.size() - 2]) &&
                  !suffix.empty() && is_digit(suffix[0]);
      }
      if (!decimal) indices.push_back(i);
    }
    previous_was_boundary = false;
  }
  indices.push_back(tokens.size());
  return indices;
}

std::vector<std::pair<size_t, std::string>> segments(
    const std::vector<int64_t>& tokens, const std::vector<size_t>& boundaries, const Tokenizer& tokenizer) {
  std::vector<std::pair<size_t, std::string>> out;
  for (size_t i = 0; i + 1 < boundaries.size(); ++i) {
    out.emplace_back(boundaries[i + 1] - boundaries[i],
                     tokenizer.decode({tokens.begin() + boundaries[i], tokens.begin() + boundaries[i + 1]}));
  }
  return out;
}

std::unordered_set<int64_t> all_but_first(const std::vector<int64_t>& tokens) {
  return tokens.empty() ? std::unordered_set<int64_t>{} : std::unordered_set<int64_t>(tokens.begin() + 1, tokens.end());
}

}  // namespace

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::u32string to_utf32(const std::string& text) {
  std::u32string out;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = text[i];
    int length = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (length == 0 || i + length > text.size()) throw std::invalid_argument("the text is not UTF-8");
    char32_t code = length == 1 ? c : c & (0x7f >> length);
    for (int k = 1; k < length; ++k) {
      unsigned char next = text[i + k];
      if ((next >> 6) != 2) throw std::invalid_argument("the text is not UTF-8");
      code = (code << 6) | (next & 0x3f);
    }
    out += code;
    i += length;
  }
  return out;
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  for (char32_t c : text) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  for (const auto& word : split(to_utf32(text))) words.push_back(to_utf8(word));
  return words;
}

std::pair<std::string, int> prepare_text_prompt(const std::string& input, const TextOptions& options) {
  std::u32string text = strip(to_utf32(input));
  if (!options.replace_characters.empty()) {
    std::u32string translated;
    for (char32_t c : text) {
      auto found = options.replace_characters.find(std::u32string(1, c));
      translated += found == options.replace_characters.end() ? std::u32string(1, c) : found->second;
    }
    text = drop_weak_after_sentence_end(join(split(translated)));
  }
  if (text.empty()) throw std::invalid_argument("Text prompt cannot be empty");
  text = replace(replace(replace(text, U"\n", U" "), U"\r", U" "), U"  ", U" ");
  if (options.remove_semicolons) text = replace(text, U";", U",");
  int frames_after_eos_guess = split(text).size() <= 4 ? 3 : 1;
  if (options.capitalize_first_letter && !is_upper(text[0])) text = upper(text[0]) + text.substr(1);
  if (options.append_terminal_punctuation) text = ensure_terminal_punctuation(text);
  if (options.pad_with_spaces_for_short_inputs && split(text).size() < 5) text = std::u32string(8, U' ') + text;
  return {to_utf8(text), frames_after_eos_guess};
}

std::vector<std::string> split_into_best_sentences(
    const Tokenizer& tokenizer, const std::string& input, int max_tokens, const TextOptions& options) {
  std::string text = to_utf8(strip(to_utf32(prepare_text_prompt(input, options).first)));
  std::vector<int64_t> tokens = tokenizer.encode(text);
  auto sentence_ends = all_but_first(tokenizer.encode(".!...?"));
  auto sentences = segments(tokens, boundary_indices(tokens, sentence_ends, &tokenizer), tokenizer);
  auto fallback = all_but_first(tokenizer.encode(",;:"));
  std::vector<std::pair<size_t, std::string>> refined;
  for (const auto& [count, sentence] : sentences) {
    if (count <= static_cast<size_t>(max_tokens)) {
      refined.emplace_back(count, sentence);
      continue;
    }
    std::vector<int64_t> sub_tokens = tokenizer.encode(to_utf8(strip(to_utf32(sentence))));
    auto parts = segments(sub_tokens, boundary_indices(sub_tokens, fallback, nullptr), tokenizer);
    if (parts.size() > 1) {
      refined.insert(refined.end(), parts.begin(), parts.end());
    } else {
      refined.emplace_back(count, sentence);
    }
  }
  std::vector<std::string> chunks;
  std::string current;
  size_t current_count = 0;
  for (const auto& [count, sentence] : refined) {
    if (current.empty()) {
      current = sentence, current_count = count;
    } else if (current_count + count > static_cast<size_t>(max_tokens)) {
      chunks.push_back(to_utf8(strip(to_utf32(current))));
      current = sentence, current_count = count;
    } else {
      current += " " + sentence, current_count += count;
    }
  }
  if (!current.empty()) chunks.push_back(to_utf8(strip(to_utf32(current))));
  return chunks;
}

}  // namespace phaseconv
