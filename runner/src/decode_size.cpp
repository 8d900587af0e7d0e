#include "decode_size.h"

#include <algorithm>

namespace phaseconv {

int64_t decode_size(int64_t queued, const std::vector<int64_t>& sizes, double ahead_ms, double frame_ms,
                    bool complete) {
  const int64_t largest = sizes.front();
  if (queued < largest && !complete && ahead_ms >= largest * frame_ms) return 0;
  auto fits = std::find_if(sizes.begin(), sizes.end(), [&](int64_t n) { return n <= queued; });
  return fits == sizes.end() ? 0 : *fits;
}

}  // namespace phaseconv
