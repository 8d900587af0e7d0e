// pocket-tts's text handling (pocket_tts/models/text_chunking.py), line for line: how a text is
// prepared for the model and split into the chunks it speaks one at a time.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer.h"

namespace phaseconv {

struct TextOptions {
  bool pad_with_spaces_for_short_inputs = false;
  bool remove_semicolons = false;
  bool append_terminal_punctuation = true;
  bool capitalize_first_letter = true;
  std::map<std::u32string, std::u32string> replace_characters;
};

// prepare_text_prompt: the text as the model reads it, and the frames to generate after the end of
// speech when the config names none (3 for up to four words, else 1). Throws on a text left empty.
std::pair<std::string, int> prepare_text_prompt(const std::string& text, const TextOptions& options);

// split_into_best_sentences: the text's chunks, sentences grouped up to `max_tokens` tokens.
std::vector<std::string> split_into_best_sentences(
    const Tokenizer& tokenizer, const std::string& text, int max_tokens, const TextOptions& options);

// Python's str.isspace() of one character.
bool is_space(char32_t c);

// Python's str.split(): the words between runs of whitespace.
std::vector<std::string> split_words(const std::string& text);

std::u32string to_utf32(const std::string& text);
std::string to_utf8(const std::u32string& text);

}  // namespace phaseconv
