// phaseconv-tts-decode-size: for each case on stdin (a JSON line: queued, sizes most first, ahead_ms,
// frame_ms, complete), the frames the C++ runner's decoder takes in its next call, a line each. For
// the test that holds it against phaseconv.tts.decoding.decode_size.
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "../src/decode_size.h"

int main() {
  for (std::string line; std::getline(std::cin, line);) {
    auto c = nlohmann::json::parse(line);
    std::cout << phaseconv::decode_size(c.at("queued"), c.at("sizes").get<std::vector<int64_t>>(), c.at("ahead_ms"),
                                        c.at("frame_ms"), c.at("complete"))
              << "\n";
  }
}
