// XNNPACK's thread pool, sized as ExecuTorch's own runners size it (examples/models/llama/main.cpp:
// get_threadpool()->_unsafe_reset_threadpool(n), before any program loads; after a load, resetting
// it crashes the process). The wheel ships libexecutorch_threadpool.so but not its header: the two
// functions are declared here, as the library exports them; nothing else of the class is used.
#include <mutex>
#include <optional>

#include "program.h"

namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace phaseconv {

void set_threads(int threads) {
  static std::mutex mutex;
  static std::optional<int> sized;  // the pool is sized once per process, before the first program loads
  std::lock_guard<std::mutex> lock(mutex);
  if (sized) {
    if (*sized != threads) {
      throw UserError("XNNPACK's thread pool is sized once per process, and this one's has " +
                      std::to_string(*sized) + " threads (asked for " + std::to_string(threads) + ")");
    }
    return;
  }
  auto* pool = executorch::extension::threadpool::get_threadpool();
  if (threads < 1 || pool == nullptr || !pool->_unsafe_reset_threadpool(static_cast<uint32_t>(threads))) {
    throw UserError("XNNPACK's thread pool did not take " + std::to_string(threads) + " threads");
  }
  sized = threads;
}

}  // namespace phaseconv
