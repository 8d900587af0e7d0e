#include "program.h"

#include <executorch/extension/tensor/tensor.h>
#include <executorch/extension/threadpool/threadpool_guard.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/span.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "contract.h"

namespace phaseconv {
namespace {

using executorch::extension::Module;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::Span;
namespace method = contract::method;

template <size_t N>
void set_xnnpack_option(const char (&name)[N], executorch::runtime::OptionValue value) {
  static_assert(N <= executorch::runtime::kMaxOptionKeyLength);
  executorch::runtime::BackendOption option{};
  std::copy(std::begin(name), std::end(name), option.key);
  option.value = value;
  auto error = executorch::runtime::set_option("XnnpackBackend", {&option, 1});
  if (error != executorch::runtime::Error::Ok) {
    throw std::runtime_error(std::string("ExecuTorch refused XNNPACK option ") + name);
  }
}

}  // namespace

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One thread's planned memory, buffers in MethodMeta's order: the first (temporaries) its own, the others
// (the program's state) the program's, shared with the other thread.
class Program::Arenas {
 public:
  Arenas(size_t temporaries, std::vector<std::vector<uint8_t>>& state) : own_(temporaries) {
    spans_.emplace_back(own_.data(), own_.size());
    for (auto& buffer : state) spans_.emplace_back(buffer.data(), buffer.size());
    allocator_ = std::make_unique<HierarchicalAllocator>(Span<Span<uint8_t>>(spans_.data(), spans_.size()));
  }
  HierarchicalAllocator* get() { return allocator_.get(); }

 private:
  std::vector<uint8_t> own_;
  std::vector<Span<uint8_t>> spans_;
  std::unique_ptr<HierarchicalAllocator> allocator_;
};

Program::Program(const std::string& path) : path_(path) {
  set_xnnpack_option("workspace_sharing_mode", 0);  // each delegate its own workspace: the threads run at once
  std::FILE* exists = std::fopen(path.c_str(), "rb");
  if (exists == nullptr) throw UserError("no such file: " + path);
  std::fclose(exists);
  double begin = now_ms();
  lm_ = std::make_unique<Module>(path, Module::LoadMode::Mmap);
  auto names = lm_->method_names();
  if (!names.ok()) throw UserError(path + " is not an ExecuTorch program");
  if (!names->count(method::kSettings)) {
    throw UserError(path + " is not a text-to-speech program: it has no settings (make one with `phaseconv lower "
                           "pocket-tts-tts:CONFIG`)");
  }
  auto settings = run(Thread::kLanguageModel, method::kSettings).at(0);
  if (!settings.isString()) throw UserError(path + " is not a text-to-speech program: its settings are no text");
  auto text = settings.toString();
  settings_ = parse_settings(std::string(text.data(), text.size()), path);
  decoder_ = std::make_unique<Module>(lm_->program());
  for (const auto& name : *names) {
    if (name == method::kSettings || name == method::kTokenizer || name == method::kReadVoice) continue;
    if (name.rfind(method::kVoice, 0) == 0 && settings_.voices.count(name.substr(std::strlen(method::kVoice)))) {
      continue;  // a built-in voice: a constant, read when chosen
    }
    if (name == method::kResetEncoder || name == method::kVoiceStart || name == method::kEncodeVoice) {
      encoder_methods_.push_back(name);
    } else if (name.rfind(method::kDecode, 0) == 0 || name == method::kResetDecoder) {
      decoder_methods_.push_back(name);
    } else {
      lm_methods_.push_back(name);
    }
  }
  // Each thread's temporaries sized to the largest of its methods' (the voice encoder runs on the language
  // model's thread), the state to the largest of every method's.
  size_t lm_temporaries = 0, decoder_temporaries = 0;
  const std::pair<const std::vector<std::string>*, size_t*> by_thread[] = {
      {&lm_methods_, &lm_temporaries}, {&encoder_methods_, &lm_temporaries}, {&decoder_methods_, &decoder_temporaries}};
  for (const auto& [methods, temporaries] : by_thread) {
    for (const auto& name : *methods) {
      auto meta = lm_->method_meta(name);
      if (!meta.ok()) throw UserError(path + ": its method " + name + " does not load");
      for (size_t i = 0; i < meta->num_memory_planned_buffers(); ++i) {
        auto planned = meta->memory_planned_buffer_size(i);
        if (!planned.ok()) throw UserError(path + ": its method " + name + " has no memory plan");
        size_t size = static_cast<size_t>(planned.get());
        if (i == 0) {
          *temporaries = std::max(*temporaries, size);
          continue;
        }
        if (state_.size() < i) state_.resize(i);
        if (state_[i - 1].size() < size) state_[i - 1].resize(size);
      }
    }
  }
  lm_arenas_ = std::make_unique<Arenas>(lm_temporaries, state_);
  decoder_arenas_ = std::make_unique<Arenas>(decoder_temporaries, state_);
  load_ms_ = now_ms() - begin;
}

Program::~Program() = default;

std::string Program::tokenizer() const {
  if (settings_.tokenizer.empty()) return "";
  auto outputs = lm_->execute(method::kTokenizer);
  if (!outputs.ok() || outputs->empty() || !outputs->at(0).isTensor()) {
    throw UserError(path_ + ": the tokenizer it carries does not read");
  }
  auto bytes = outputs->at(0).toTensor();
  return std::string(bytes.const_data_ptr<char>(), bytes.nbytes());
}

void Program::load(Module& module, Arenas& arenas, const std::vector<std::string>& methods, bool weight_cache) {
  double begin = now_ms();
  set_xnnpack_option("weight_cache_enabled", weight_cache);
  for (const auto& name : methods) {
    if (module.load_method(name, arenas.get()) != executorch::runtime::Error::Ok) {
      throw UserError(path_ + ": its method " + name + " does not load");
    }
  }
  load_ms_ += now_ms() - begin;
}

void Program::load_speech() {
  if (speech_loaded_) return;
  // The language model's methods share one packed copy of its weights through XNNPACK's weight cache;
  // the decoder's stay out of it, as a delegate that uses the cache runs under the cache's one lock
  // and would wait for the language model's thread.
  load(*lm_, *lm_arenas_, lm_methods_, true);
  warm_prompts();
  // A delegate takes the process's one thread pool when it loads, and two threads calling into one pool
  // wait for each other: the decoder's load without it and run on the decoder's thread alone.
  executorch::extension::threadpool::NoThreadPoolGuard alone;
  load(*decoder_, *decoder_arenas_, decoder_methods_, false);
  // One frame of silence decoded, then the decoder reset: its first call's set-up (XNNPACK's workspace,
  // the first touch of its planned memory) paid while loading, not after the text.
  double begin = now_ms();
  auto silence = executorch::extension::make_tensor_ptr<float>(
      {1, 1, static_cast<int>(settings_.latent_dim)}, std::vector<float>(settings_.latent_dim, 0.0f));
  run(Thread::kDecoder, method::kDecode, {*silence});
  run(Thread::kDecoder, method::kResetDecoder);
  load_ms_ += now_ms() - begin;
  speech_loaded_ = true;
}

void Program::warm_prompts() {
  // Each prompt method once at its largest call, then the cache cleared: its first call's set-up (a
  // method of a run-time token count sizes XNNPACK's workspace at that call) paid while loading.
  double begin = now_ms();
  const auto tokens = static_cast<int>(settings_.prompt_tokens), dim = static_cast<int>(settings_.dim);
  auto embeddings = executorch::extension::make_tensor_ptr<float>({1, tokens, dim},
                                                                  std::vector<float>(tokens * dim, 0.0f));
  auto noise = executorch::extension::make_tensor_ptr<float>({1, static_cast<int>(settings_.latent_dim)},
                                                             std::vector<float>(settings_.latent_dim, 0.0f));
  auto positions = [](int count) {
    std::vector<int64_t> places(count);
    std::iota(places.begin(), places.end(), 0);
    return executorch::extension::make_tensor_ptr<int64_t>({count}, std::move(places));
  };
  for (int64_t block : settings_.prompt_blocks) {
    run(Thread::kLanguageModel, method::kPrompt + std::to_string(block), {*embeddings, *positions(tokens)});
    run(Thread::kLanguageModel, method::kFirstFrame + std::to_string(block),
        {*embeddings, *positions(tokens + 1), *noise});
  }
  run(Thread::kLanguageModel, method::kClearCache);
  load_ms_ += now_ms() - begin;
}

void Program::load_encoder() {
  // Outside the weight cache, so that unloading frees the encoder's packed weights: they are needed once
  load(*lm_, *lm_arenas_, encoder_methods_, false);
}

void Program::unload_encoder() {
  for (const auto& name : encoder_methods_) lm_->unload_method(name);
}

std::vector<EValue> Program::run(Thread thread, const std::string& name, const std::vector<EValue>& inputs) {
  auto result = (thread == Thread::kDecoder ? decoder_ : lm_)->execute(name, inputs);
  if (!result.ok()) {
    throw std::runtime_error("the program's method " + name + " failed (ExecuTorch error " +
                             std::to_string(static_cast<int>(result.error())) + ")");
  }
  return *result;
}

}  // namespace phaseconv
