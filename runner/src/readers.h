// Each reader a file from outside reaches, as one call over the file's bytes: the fuzz targets
// (fuzz/) and phaseconv-tts-read (the regression corpus, replayed by the tests) call these.
#pragma once

#include <string>

namespace phaseconv {

// `kind`: voice-state, wav, tokenizers, sentencepiece, settings or text. Reads `data` as such a file
// (for text: speaks nothing, but splits and prepares it, with the tokenizer at `tokenizer`). Returns
// false when the reader refused it (its error said), true when it read; anything else is a defect.
bool read_one(const std::string& kind, const std::string& data, const std::string& tokenizer = "");

}  // namespace phaseconv
