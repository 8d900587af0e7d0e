// A libFuzzer target for one of the runner's readers (READER, a kind of readers.h). The text reader
// takes its tokenizer from PHASECONV_FUZZ_TOKENIZER.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "readers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* tokenizer = std::getenv("PHASECONV_FUZZ_TOKENIZER");
  phaseconv::read_one(READER, std::string(reinterpret_cast<const char*>(data), size), tokenizer ? tokenizer : "");
  return 0;
}
