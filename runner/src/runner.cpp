#include "runner.h"

#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/backend/options.h>
#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/core/span.h>
#include <executorch/extension/threadpool/threadpool_guard.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "audio.h"
#include "contract.h"

// The thread pool XNNPACK runs on (libexecutorch_threadpool.so; the wheel ships no header for it).
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

namespace phaseconv {
namespace {

using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::runtime::EValue;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::Span;
namespace key = contract::key;
namespace method = contract::method;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TensorPtr floats(std::vector<float> values, std::vector<executorch::aten::SizesType> sizes) {
  return executorch::extension::make_tensor_ptr(std::move(sizes), std::move(values));
}

TensorPtr longs(std::vector<int64_t> values, std::vector<executorch::aten::SizesType> sizes) {
  return executorch::extension::make_tensor_ptr(std::move(sizes), std::move(values));
}

std::vector<float> values_of(const executorch::aten::Tensor& tensor) {
  const float* data = tensor.const_data_ptr<float>();
  return {data, data + tensor.numel()};
}

std::vector<float> values_of(const EValue& value) { return values_of(value.toTensor()); }

template <typename T>
std::optional<T> optional_value(const nlohmann::json& json, const char* name) {
  return json.at(name).is_null() ? std::nullopt : std::optional<T>(json.at(name).get<T>());
}

Settings parse_settings(const std::string& text, const std::string& path) {
  nlohmann::json json = nlohmann::json::parse(text);
  if (json.value(key::kKind, std::string()) != contract::kKind) {
    throw UserError(path + " is not a text-to-speech program");
  }
  if (json.value(key::kVersion, 1) != contract::kVersion) {
    throw UserError(path + " was lowered by another phaseconv (program version " +
                    std::to_string(json.value(key::kVersion, 1)) + ", this runner reads " +
                    std::to_string(contract::kVersion) + "): lower it again with `phaseconv lower pocket-tts-tts:CONFIG`");
  }
  Settings s;
  s.config = json.at(key::kConfig), s.weights = json.at(key::kWeights);
  s.tokenizer = json.at(key::kTokenizer).is_null() ? "" : json.at(key::kTokenizer).get<std::string>();
  s.voice_cloning = json.at(key::kVoiceCloning), s.voice_start = json.at(key::kVoiceStart);
  s.capacity = json.at(key::kCapacity), s.cache_block = json.at(key::kCacheBlock);
  s.layers = json.at(key::kLayers), s.kv_heads = json.at(key::kKvHeads), s.head_dim = json.at(key::kHeadDim);
  s.dim = json.at(key::kDim), s.latent_dim = json.at(key::kLatentDim), s.n_bins = json.at(key::kNBins);
  s.sample_rate = json.at(key::kSampleRate), s.frame_size = json.at(key::kFrameSize);
  s.frame_rate = json.at(key::kFrameRate), s.temperature = json.at(key::kTemperature);
  s.eos_threshold = json.at(key::kEosThreshold);
  s.noise_clamp = optional_value<double>(json, key::kNoiseClamp);
  s.frames_after_eos = optional_value<int64_t>(json, key::kFramesAfterEos);
  s.min_frames_before_eos = json.at(key::kMinFramesBeforeEos);
  s.max_tokens_per_chunk = json.at(key::kMaxTokensPerChunk), s.max_text_tokens = json.at(key::kMaxTextTokens);
  s.tokens_per_second = json.at(key::kTokensPerSecond), s.gen_seconds_padding = json.at(key::kGenSecondsPadding);
  s.max_voice_seconds = json.at(key::kMaxVoiceSeconds);
  s.prompt_tokens = json.at(key::kPromptTokens), s.voice_positions = json.at(key::kVoicePositions);
  s.pad = json.at(key::kPad);
  s.generate_blocks = json.at(key::kGenerateBlocks).get<std::vector<int64_t>>();
  s.prompt_blocks = json.at(key::kPromptBlocks).get<std::vector<int64_t>>();
  s.decode_frames = json.at(key::kDecodeFrames).get<std::vector<int64_t>>();
  std::sort(s.decode_frames.rbegin(), s.decode_frames.rend());  // the most frames first
  s.voices = json.at(key::kVoices).get<std::map<std::string, int64_t>>();
  s.default_voice = optional_value<std::string>(json, key::kDefaultVoice);
  s.quantize = optional_value<std::string>(json, key::kQuantize);
  s.quantize_decoder = optional_value<std::string>(json, key::kQuantizeDecoder);
  s.text.pad_with_spaces_for_short_inputs = json.at(key::kPadWithSpacesForShortInputs);
  s.text.remove_semicolons = json.at(key::kRemoveSemicolons);
  s.text.append_terminal_punctuation = json.at(key::kAppendTerminalPunctuation);
  s.text.capitalize_first_letter = json.at(key::kCapitalizeFirstLetter);
  for (const auto& [from, to] : json.at(key::kReplaceCharacters).items()) {
    s.text.replace_characters[to_utf32(from)] = to_utf32(to.get<std::string>());
  }
  return s;
}

std::string read_file(const std::string& path, const std::string& what) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw UserError("no such " + what + " file: " + path);
  std::string data;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) data.append(buffer, n);
  std::fclose(file);
  return data;
}

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

int64_t Settings::max_generated_frames(int64_t tokens) const {
  return static_cast<int64_t>(std::ceil((tokens / tokens_per_second + gen_seconds_padding) * frame_rate));
}

int64_t Settings::block_for(const std::vector<int64_t>& ladder, int64_t position) const {
  int64_t block = position / cache_block;
  return *std::find_if(ladder.begin(), ladder.end(), [&](int64_t b) { return b >= block; });
}

// The decoder's thread: resets and latents in the order they were queued, the latents queued while it
// decoded the last ones decoded at once (decode_N, as pocket-tts's decoder thread does; the first
// frame of a chunk never waits), each frame handed to the sink from here.
class Runner::Decoder {
 public:
  Decoder(Runner& runner, Module& module) : runner_(runner), module_(module), thread_([this] { loop(); }) {}

  ~Decoder() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void start(const FrameSink* sink, Report* report, double started) {
    sink_ = sink, report_ = report, started_ = started, refused_ = false;
  }

  void reset() { push({true, {}}); }
  void decode(std::vector<float> latent) { push({false, std::move(latent)}); }
  bool refused() const { return refused_; }

  // Every job queued so far done.
  void finish() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return jobs_.empty() && !busy_; });
  }

 private:
  struct Job {
    bool reset;
    std::vector<float> latent;
  };

  void push(Job job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }

  void loop() {
    const Settings& s = runner_.settings_;
    std::vector<float> fade = linspace(0.0f, 1.0f, static_cast<int>(s.sample_rate / 200));  // the 5 ms fade-in
    bool first_of_chunk = false;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
      }
      if (job.reset) {
        double begin = now_ms();
        runner_.run(module_, method::kResetDecoder, {});
        report_->reset_ms = now_ms() - begin;
        first_of_chunk = true;
      } else if (!refused_) {
        std::vector<float> latents = std::move(job.latent);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          int64_t queued = 1;
          for (auto it = jobs_.begin(); it != jobs_.end() && !it->reset && queued < s.decode_frames.front(); ++it) {
            ++queued;
          }
          int64_t frames = *std::find_if(s.decode_frames.begin(), s.decode_frames.end(),
                                         [&](int64_t n) { return n <= queued; });
          for (int64_t i = 1; i < frames; ++i) {
            latents.insert(latents.end(), jobs_.front().latent.begin(), jobs_.front().latent.end());
            jobs_.pop_front();
          }
        }
        const int frames = static_cast<int>(latents.size() / s.latent_dim);
        double begin = now_ms();
        auto input = floats(std::move(latents), {1, frames, static_cast<int>(s.latent_dim)});
        std::string name = frames == 1 ? method::kDecode : method::kDecodeFrames + std::to_string(frames);
        std::vector<float> pcm = values_of(runner_.run(module_, name, {*input}).at(0));
        double each = (now_ms() - begin) / frames;
        report_->decode_calls += 1;
        for (int frame = 0; frame < frames && !refused_; ++frame) {
          float* samples = pcm.data() + frame * s.frame_size;
          if (first_of_chunk) {
            for (size_t i = 0; i < fade.size() && i < static_cast<size_t>(s.frame_size); ++i) samples[i] *= fade[i];
          }
          first_of_chunk = false;
          report_->decode_ms.push_back(each);
          if (report_->frames++ == 0) report_->first_audio_ms = now_ms() - started_;
          if (!(*sink_)(samples, s.frame_size)) refused_ = true;
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        busy_ = false;
      }
      done_.notify_all();
    }
  }

  Runner& runner_;
  Module& module_;
  const FrameSink* sink_ = nullptr;
  Report* report_ = nullptr;
  double started_ = 0;
  std::atomic<bool> refused_{false};
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  bool stopping_ = false, busy_ = false;
  std::thread thread_;  // last: it starts once the members above are ready
};

// One thread's planned memory, buffers in MethodMeta's order: the first (temporaries) its own, the others
// (the program's state) the runner's, shared with the other thread.
class Runner::Arenas {
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

Runner::Runner(const std::string& path, int threads, const std::optional<std::string>& tokenizer_path) : path_(path) {
  executorch::extension::threadpool::get_threadpool()->_unsafe_reset_threadpool(threads);
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
  auto text = run(*lm_, method::kSettings, {}).at(0).toString();
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
        size_t size = static_cast<size_t>(meta->memory_planned_buffer_size(i).get());
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
  std::string kind = settings_.tokenizer, data;
  if (tokenizer_path) {
    kind = tokenizer_kind(*tokenizer_path), data = read_file(*tokenizer_path, "tokenizer");
  } else if (!kind.empty()) {
    auto bytes = run(*lm_, method::kTokenizer, {}).at(0).toTensor();
    data.assign(bytes.const_data_ptr<char>(), bytes.numel());
  } else {
    throw UserError(path + " carries no tokenizer: give --tokenizer (the config's .model or .json)");
  }
  const std::string source = tokenizer_path.value_or("the program's tokenizer");
  try {
    tokenizer_ = load_tokenizer(kind, data);
  } catch (const std::exception& error) {
    throw UserError(source + " is not a " + kind + " tokenizer: " + error.what());
  }
  if (tokenizer_->vocab_size() != settings_.n_bins) {
    throw UserError(source + ": tokenizer has vocab size=" + std::to_string(tokenizer_->vocab_size()) +
                    " but nbins=" + std::to_string(settings_.n_bins) + " was specified (the config's n_bins)");
  }
  load_ms_ = now_ms() - begin;
  decoder_thread_ = std::make_unique<Decoder>(*this, *decoder_);
}

void Runner::load(Module& module, Arenas& arenas, const std::vector<std::string>& methods, bool weight_cache) {
  double begin = now_ms();
  set_xnnpack_option("weight_cache_enabled", weight_cache);
  for (const auto& name : methods) {
    if (module.load_method(name, arenas.get()) != executorch::runtime::Error::Ok) {
      throw UserError(path_ + ": its method " + name + " does not load");
    }
  }
  load_ms_ += now_ms() - begin;
}

void Runner::load_speech() {
  if (speech_loaded_) return;
  // The language model's methods share one packed copy of its weights through XNNPACK's weight cache;
  // the decoder's stay out of it, as a delegate that uses the cache runs under the cache's one lock
  // and would wait for the language model's thread.
  load(*lm_, *lm_arenas_, lm_methods_, true);
  // A delegate takes the process's one thread pool when it loads, and two threads calling into one pool
  // wait for each other: the decoder's load without it and run on the decoder's thread alone.
  executorch::extension::threadpool::NoThreadPoolGuard alone;
  load(*decoder_, *decoder_arenas_, decoder_methods_, false);
  // One frame of silence decoded, then the decoder reset: its first call's set-up (XNNPACK's workspace,
  // the first touch of its planned memory) paid while loading, not after the text.
  double begin = now_ms();
  auto silence = floats(std::vector<float>(settings_.latent_dim, 0.0f), {1, 1, static_cast<int>(settings_.latent_dim)});
  run(*decoder_, method::kDecode, {*silence});
  run(*decoder_, method::kResetDecoder, {});
  load_ms_ += now_ms() - begin;
  speech_loaded_ = true;
}

std::vector<float> Runner::encode_voice(const std::vector<float>& audio) {
  const Settings& s = settings_;
  // Outside the weight cache, so that unloading frees the encoder's packed weights: they are needed once
  load(*lm_, *lm_arenas_, encoder_methods_, false);
  run(*lm_, method::kResetEncoder, {});
  std::vector<float> conditioning;
  if (s.voice_start) conditioning = values_of(run(*lm_, method::kVoiceStart, {}).at(0));
  for (size_t at = 0; at < audio.size(); at += s.frame_size) {
    auto frame = floats({audio.begin() + at, audio.begin() + at + s.frame_size}, {1, 1, static_cast<int>(s.frame_size)});
    auto encoded = values_of(run(*lm_, method::kEncodeVoice, {*frame}).at(0));
    conditioning.insert(conditioning.end(), encoded.begin(), encoded.end());
  }
  for (const auto& name : encoder_methods_) lm_->unload_method(name);
  return conditioning;
}

Runner::~Runner() = default;

std::vector<EValue> Runner::run(Module& module, const std::string& name, const std::vector<EValue>& inputs) {
  auto result = module.execute(name, inputs);
  if (!result.ok()) {
    throw std::runtime_error("the program's method " + name + " failed (ExecuTorch error " +
                             std::to_string(static_cast<int>(result.error())) + ")");
  }
  return *result;
}

std::vector<float> Runner::noise() {
  // The flow's starting point: normal with std sqrt(temperature), truncated to the clamp when the
  // config has one (drawn again until inside it); Box-Muller over the generator's doubles.
  std::vector<float> values(settings_.latent_dim);
  double std = std::sqrt(temperature_);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (auto& v : values) {
    double x;
    do {
      double u1 = uniform(generator_), u2 = uniform(generator_);
      x = std * std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
    } while (settings_.noise_clamp && std::abs(x) > *settings_.noise_clamp);
    v = static_cast<float>(x);
  }
  return values;
}

void Runner::prompt(const std::vector<float>& embeddings, int64_t count, int64_t first) {
  const int64_t size = settings_.prompt_tokens, dim = settings_.dim;
  if (first + count > settings_.capacity) {
    throw UserError("the voice and text need positions up to " + std::to_string(first + count) +
                    "; the program holds " + std::to_string(settings_.capacity) +
                    " (lower it with a larger --capacity, or use a shorter voice)");
  }
  for (int64_t start = 0; start < count; start += size) {
    int64_t part = std::min(size, count - start);
    std::vector<float> padded(size * dim, 0.0f);
    std::copy(embeddings.begin() + start * dim, embeddings.begin() + (start + part) * dim, padded.begin());
    std::vector<int64_t> places(size, settings_.pad);
    for (int64_t i = 0; i < part; ++i) places[i] = first + start + i;
    auto input = floats(std::move(padded), {1, static_cast<int>(size), static_cast<int>(dim)});
    auto positions = longs(std::move(places), {static_cast<int>(size)});
    int64_t block = settings_.block_for(settings_.prompt_blocks, first + start + part - 1);
    run(*lm_, method::kPrompt + std::to_string(block), {*input, *positions});
  }
  noise();  // a prompt call draws noise in pocket-tts
}

void Runner::load_state(const VoiceState& state) {
  const Settings& s = settings_;
  if (state.layers != s.layers || state.kv_heads != s.kv_heads || state.head_dim != s.head_dim) {
    throw UserError("the voice state has " + std::to_string(state.layers) + " layers of " +
                    std::to_string(state.kv_heads) + " x " + std::to_string(state.head_dim) + "; " + s.config +
                    "'s language model has " + std::to_string(s.layers) + " of " + std::to_string(s.kv_heads) +
                    " x " + std::to_string(s.head_dim) + " (a voice of another model?)");
  }
  if (state.positions > s.capacity) {
    throw UserError("the voice takes " + std::to_string(state.positions) + " positions; the program holds " +
                    std::to_string(s.capacity));
  }
  const int64_t size = s.voice_positions, row = s.kv_heads * s.head_dim;
  for (int64_t start = 0; start < state.positions; start += size) {
    int64_t part = std::min(size, state.positions - start);
    std::vector<float> padded(s.layers * 2 * size * row, 0.0f);
    for (int64_t block = 0; block < s.layers * 2; ++block) {  // per layer, keys then values
      const float* from = state.values.data() + (block * state.positions + start) * row;
      std::copy(from, from + part * row, padded.begin() + block * size * row);
    }
    std::vector<int64_t> places(size, s.pad);
    for (int64_t i = 0; i < part; ++i) places[i] = start + i;
    auto input = floats(std::move(padded), {static_cast<int>(s.layers), 2, static_cast<int>(size),
                                            static_cast<int>(s.kv_heads), static_cast<int>(s.head_dim)});
    auto positions = longs(std::move(places), {static_cast<int>(size)});
    run(*lm_, method::kLoadVoice, {*input, *positions});
  }
}

void Runner::set_voice(const std::optional<std::string>& chosen, Report& report) {
  const Settings& s = settings_;
  double begin = now_ms(), loading = load_ms_;
  std::optional<std::string> voice = chosen ? chosen : s.default_voice;
  std::optional<VoiceState> state;
  std::vector<float> conditioning;  // an audio voice's: encoded before the speech methods load, so never both
  std::string described = "none";
  std::FILE* file = voice ? std::fopen(voice->c_str(), "rb") : nullptr;
  if (file != nullptr) std::fclose(file);
  if (!voice) {
    // none: the cache stays empty before the text
  } else if (s.voices.count(*voice)) {
    auto tensor = run(*lm_, std::string(method::kVoice) + *voice, {}).at(0).toTensor();
    state = VoiceState{values_of(tensor), s.layers, tensor.size(2), s.kv_heads, s.head_dim};
    described = *voice + " (built in)";
  } else if (file != nullptr && voice->size() > 12 && voice->substr(voice->size() - 12) == ".safetensors") {
    try {
      state = read_voice_state(*voice);
    } catch (const std::runtime_error& error) {
      throw UserError(error.what());
    }
    described = voice->substr(voice->find_last_of('/') + 1) + " (voice state)";
  } else if (file != nullptr) {
    if (!s.voice_cloning) {
      throw UserError("this program's weights have no voice cloning: it speaks in its built-in voices or a "
                      ".safetensors voice state; for voice cloning, accept the terms at "
                      "https://huggingface.co/kyutai/pocket-tts and lower the program again while logged in");
    }
    bool truncated = false;
    std::vector<float> audio;
    try {
      audio = read_voice_audio(*voice, static_cast<int>(s.sample_rate), static_cast<int>(s.frame_size),
                               s.max_voice_seconds, truncated);
    } catch (const std::runtime_error& error) {
      throw UserError(error.what());
    }
    conditioning = encode_voice(audio);
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", s.max_voice_seconds);
    described = truncated ? std::string("audio, its first ") + seconds + " s" : "audio";
  } else {
    std::string carried;
    for (const auto& [name, _] : s.voices) carried += (carried.empty() ? "" : ", ") + name;
    if (voice->find('/') != std::string::npos || voice->find('.') != std::string::npos) {
      throw UserError("no such voice file: " + *voice);
    }
    throw UserError("no voice '" + *voice + "': the program's built-in voices are " +
                    (carried.empty() ? "none" : carried) +
                    " (`phaseconv tts PROGRAM --list-voices`); --voice also takes a .safetensors voice state or an "
                    "audio file");
  }
  load_speech();
  run(*lm_, method::kClearCache, {});  // the cache holds numbers from here on
  voice_positions_ = 0;
  if (state) {
    load_state(*state);
    voice_positions_ = state->positions;
  } else if (!conditioning.empty()) {
    int64_t count = static_cast<int64_t>(conditioning.size()) / s.dim;
    prompt(conditioning, count, 0);
    voice_positions_ = count;
  }
  report.voice = described;
  report.voice_ms = now_ms() - begin - (load_ms_ - loading);
}

int64_t Runner::count_tokens(const std::string& text) const {
  return static_cast<int64_t>(tokenizer_->encode(prepare_text_prompt(text, settings_.text).first).size());
}

bool Runner::fits(int64_t tokens) const {
  const Settings& s = settings_;
  return tokens <= s.max_text_tokens && voice_positions_ + tokens + s.max_generated_frames(tokens) <= s.capacity;
}

std::vector<std::string> Runner::fitting(const std::string& piece) const {
  if (fits(count_tokens(piece))) return {piece};
  std::vector<std::string> parts;
  std::string current;
  for (const auto& word : split_words(piece)) {
    if (!current.empty() && !fits(count_tokens(current + " " + word))) {
      parts.push_back(current);
      current.clear();
    }
    if (!fits(count_tokens(word))) {
      throw UserError("the voice takes " + std::to_string(voice_positions_) + " of the program's " +
                      std::to_string(settings_.capacity) + " positions: no room for '" + word +
                      "' and its frames (lower it with a larger --capacity, or use a shorter voice)");
    }
    current += (current.empty() ? "" : " ") + word;
  }
  parts.push_back(current);
  return parts;
}

std::vector<Runner::Chunk> Runner::chunks(const std::string& text) const {
  std::vector<std::string> pieces;
  try {
    pieces = split_into_best_sentences(*tokenizer_, text, static_cast<int>(settings_.max_tokens_per_chunk),
                                       settings_.text);
  } catch (const std::invalid_argument& error) {
    throw UserError("nothing to say in '" + text + "': " + error.what());
  }
  std::vector<Chunk> out;
  for (const auto& piece : pieces) {
    auto parts = fitting(piece);
    for (const auto& part : parts) {
      auto [chunk, guess] = prepare_text_prompt(part, settings_.text);
      out.push_back({chunk, settings_.frames_after_eos.value_or(guess + 2), parts.size() > 1});
    }
  }
  return out;
}

std::string Runner::unknown_characters(const std::string& text) const {
  std::u32string seen, unknown;
  for (char32_t c : to_utf32(text)) {
    auto replaced = settings_.text.replace_characters.find(std::u32string(1, c));
    std::u32string as_read = replaced == settings_.text.replace_characters.end() ? std::u32string(1, c) : replaced->second;
    for (char32_t r : as_read) {
      if (is_space(r) || seen.find(r) != std::u32string::npos) continue;
      seen += r;
      auto ids = tokenizer_->encode(to_utf8(std::u32string(1, r)));
      if (std::find(ids.begin(), ids.end(), tokenizer_->unk_id()) != ids.end()) unknown += r;
    }
  }
  std::sort(unknown.begin(), unknown.end());
  std::string out;
  for (char32_t c : unknown) out += (out.empty() ? "" : " ") + to_utf8(std::u32string(1, c));
  return out;
}

bool Runner::speak(const std::string& text, double temperature, uint64_t seed, const FrameSink& sink, Report& report) {
  const Settings& s = settings_;
  temperature_ = temperature;
  generator_.seed(seed);
  load_speech();
  double started = now_ms();
  auto planned = chunks(text);
  decoder_thread_->start(&sink, &report, started);
  for (const auto& chunk : planned) {
    report.split_chunks += chunk.split;
    std::vector<int64_t> tokens = tokenizer_->encode(chunk.text);
    const int64_t count = static_cast<int64_t>(tokens.size());
    double begin = now_ms();
    auto ids = longs(tokens, {1, static_cast<int>(count)});
    prompt(values_of(run(*lm_, method::kEmbedText, {*ids}).at(0)), count, voice_positions_);
    report.prompt_ms.push_back(now_ms() - begin);
    decoder_thread_->reset();
    std::vector<float> latent(s.latent_dim, 0.0f);
    float start_flag = 1.0f;
    std::optional<int64_t> eos_frame;
    int64_t first = voice_positions_ + count;
    for (int64_t step = 0; step < s.max_generated_frames(count) && !decoder_thread_->refused(); ++step) {
      int64_t position = first + step;
      begin = now_ms();
      auto input = floats(latent, {1, 1, static_cast<int>(s.latent_dim)});
      auto flag = floats({start_flag}, {1});
      auto drawn = floats(noise(), {1, static_cast<int>(s.latent_dim)});
      auto where = longs({position}, {1});
      auto outputs = run(*lm_, method::kGenerate + std::to_string(s.block_for(s.generate_blocks, position)),
                         {*input, *flag, *drawn, *where});
      latent = values_of(outputs.at(0));
      float eos_logit = outputs.at(1).toTensor().const_data_ptr<float>()[0];
      report.lm_ms.push_back(now_ms() - begin);
      if (eos_logit > s.eos_threshold && !eos_frame && step >= s.min_frames_before_eos) eos_frame = step;
      if (eos_frame && step >= *eos_frame + chunk.frames_after_eos) break;
      decoder_thread_->decode(latent);
      start_flag = 0.0f;
    }
    report.eos_frames.push_back(eos_frame);
    report.chunks += 1;
    if (decoder_thread_->refused()) break;
  }
  decoder_thread_->finish();
  report.total_ms = now_ms() - started;
  return !decoder_thread_->refused();
}

}  // namespace phaseconv
