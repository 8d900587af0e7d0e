// phaseconv-tts-read KIND FILE... [--tokenizer FILE]: each file through one of the runner's readers
// (readers.h), as the regression tests replay what fuzzing found. Exit 0 when every file was read or
// refused with an error; a defect crashes or throws something else.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "readers.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc), files;
  std::string tokenizer;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--tokenizer" && i + 1 < args.size()) tokenizer = args[++i];
    else files.push_back(args[i]);
  }
  if (args.empty() || files.empty()) {
    std::fprintf(stderr, "usage: phaseconv-tts-read KIND FILE... [--tokenizer FILE]\n");
    return 2;
  }
  for (const auto& path : files) {
    std::ifstream file(path, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::printf("%s %s\n", phaseconv::read_one(args[0], data, tokenizer) ? "read" : "refused", path.c_str());
  }
  return 0;
}
