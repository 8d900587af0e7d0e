// phaseconv-tts-text TOKENIZER SETTINGS_JSON: for each text on stdin (a JSON string a line), its
// token ids, its decoding and its chunks as the runner makes them, a JSON line each. For tests that
// hold the C++ text handling against pocket-tts's own.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <locale>
#include <nlohmann/json.hpp>

#include "text.h"
#include "tokenizer.h"

int main(int argc, char** argv) {
  std::setlocale(LC_CTYPE, "C.UTF-8");
  if (argc != 3) {
    std::fprintf(stderr, "usage: phaseconv-tts-text TOKENIZER SETTINGS_JSON < texts\n");
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto tokenizer = phaseconv::load_tokenizer(phaseconv::tokenizer_kind(argv[1]), data);
  auto settings = nlohmann::json::parse(argv[2]);
  phaseconv::TextOptions options;
  options.pad_with_spaces_for_short_inputs = settings.at("pad_with_spaces_for_short_inputs");
  options.remove_semicolons = settings.at("remove_semicolons");
  options.append_terminal_punctuation = settings.at("append_terminal_punctuation");
  options.capitalize_first_letter = settings.at("capitalize_first_letter");
  for (const auto& [from, to] : settings.at("replace_characters").items()) {
    options.replace_characters[phaseconv::to_utf32(from)] = phaseconv::to_utf32(to.get<std::string>());
  }
  int max_tokens = settings.at("max_tokens_per_chunk");
  for (std::string line; std::getline(std::cin, line);) {
    std::string text = nlohmann::json::parse(line);
    nlohmann::json out;
    out["ids"] = tokenizer->encode(text);
    out["decoded"] = tokenizer->decode(tokenizer->encode(text));
    try {
      nlohmann::json chunks = nlohmann::json::array();
      for (const auto& chunk : phaseconv::split_into_best_sentences(*tokenizer, text, max_tokens, options)) {
        auto [prepared, guess] = phaseconv::prepare_text_prompt(chunk, options);
        chunks.push_back({chunk, prepared, guess});
      }
      out["chunks"] = chunks;
    } catch (const std::invalid_argument& error) {
      out["error"] = error.what();
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}
