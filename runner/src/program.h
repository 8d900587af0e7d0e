// The program's methods as the runner's two threads use them: one Module per thread over one loaded
// program, a state buffer both share (the cache, the decoder's and the encoder's state: the methods
// name it alike) and each thread's own temporaries, planned by the program's memory plan.
#pragma once

#include <executorch/extension/module/module.h>

#include <memory>
#include <string>
#include <vector>

#include "settings.h"

namespace phaseconv {

class Program {
 public:
  // The program at `path`, its settings read; UserError for a file that is not such a program.
  explicit Program(const std::string& path);
  ~Program();

  const std::string& path() const { return path_; }
  const Settings& settings() const { return settings_; }
  Settings& settings() { return settings_; }
  // The tokenizer the program carries (its kind in settings().tokenizer; empty: none).
  std::string tokenizer() const;
  // Time spent loading so far: the program, then the methods as they load.
  double load_ms() const { return load_ms_; }

  // The language model's and decoder's methods loaded (once), the decoder warmed with a frame of
  // silence and each prompt method with a call of its largest size: their first call's set-up is paid
  // here, not after the text.
  void load_speech();
  // The voice encoder's methods, loaded for one audio voice and unloaded after it.
  void load_encoder();
  void unload_encoder();

  enum class Thread { kLanguageModel, kDecoder };
  // A method run on its thread's Module; std::runtime_error naming it when it fails.
  std::vector<executorch::runtime::EValue> run(Thread thread, const std::string& method,
                                               const std::vector<executorch::runtime::EValue>& inputs = {});

 private:
  class Arenas;
  void load(executorch::extension::Module& module, Arenas& arenas, const std::vector<std::string>& methods,
            bool weight_cache);
  void warm_prompts();

  std::string path_;
  Settings settings_;
  double load_ms_ = 0;
  bool speech_loaded_ = false;
  std::vector<std::string> lm_methods_, decoder_methods_, encoder_methods_;
  // Planned memory, declared before the modules that use it.
  std::vector<std::vector<uint8_t>> state_;
  std::unique_ptr<Arenas> lm_arenas_, decoder_arenas_;
  std::unique_ptr<executorch::extension::Module> lm_, decoder_;
};

// XNNPACK's thread pool sized to `threads` (threads.cpp); before any program loads.
void set_threads(int threads);

// A steady clock's milliseconds, for the runner's measurements.
double now_ms();

}  // namespace phaseconv
