#include "speaker.h"

#include <executorch/extension/tensor/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "audio.h"
#include "contract.h"

namespace phaseconv {
namespace {

using executorch::extension::TensorPtr;
using executorch::runtime::EValue;
namespace method = contract::method;
using Thread = Program::Thread;

TensorPtr floats(std::vector<float> values, std::vector<executorch::aten::SizesType> sizes) {
  return executorch::extension::make_tensor_ptr(std::move(sizes), std::move(values));
}

TensorPtr longs(std::vector<int64_t> values, std::vector<executorch::aten::SizesType> sizes) {
  return executorch::extension::make_tensor_ptr(std::move(sizes), std::move(values));
}

// A method's float output of `count` values (any count: -1), checked: a program that gives another
// stops the utterance with an error, never reads past what it gave.
std::vector<float> floats_of(const std::vector<EValue>& outputs, size_t index, const std::string& name,
                             int64_t count = -1) {
  if (outputs.size() <= index || !outputs[index].isTensor()) {
    throw std::runtime_error("the program's method " + name + " gave no tensor");
  }
  const auto& tensor = outputs[index].toTensor();
  if (tensor.scalar_type() != executorch::aten::ScalarType::Float || (count >= 0 && tensor.numel() != count)) {
    throw std::runtime_error("the program's method " + name + " gave a tensor of another kind or size");
  }
  const float* data = tensor.const_data_ptr<float>();
  return {data, data + tensor.numel()};
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

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

Speaker::Speaker(const std::string& path, const std::optional<std::string>& tokenizer_path)
    : program_(path), decoder_(program_) {
  const Settings& s = program_.settings();
  std::string kind = s.tokenizer, data;
  if (tokenizer_path) {
    kind = tokenizer_kind(*tokenizer_path), data = read_file(*tokenizer_path, "tokenizer");
  } else if (!kind.empty()) {
    data = program_.tokenizer();
  } else {
    throw UserError(path + " carries no tokenizer: give --tokenizer (the config's .model or .json)");
  }
  const std::string source = tokenizer_path.value_or("the program's tokenizer");
  try {
    tokenizer_ = load_tokenizer(kind, data);
  } catch (const std::exception& error) {
    throw UserError(source + " is not a " + kind + " tokenizer: " + error.what());
  }
  if (tokenizer_->vocab_size() != s.n_bins) {
    throw UserError(source + ": tokenizer has vocab size=" + std::to_string(tokenizer_->vocab_size()) +
                    " but nbins=" + std::to_string(s.n_bins) + " was specified (the config's n_bins)");
  }
}

Speaker::~Speaker() = default;

void Speaker::stop() {
  stopping_ = true;
  decoder_.end();
}

std::vector<float> Speaker::encode_voice(const std::vector<float>& audio) {
  const Settings& s = program_.settings();
  program_.load_encoder();
  std::vector<float> conditioning;
  try {
    program_.run(Thread::kLanguageModel, method::kResetEncoder);
    if (s.voice_start) conditioning = floats_of(program_.run(Thread::kLanguageModel, method::kVoiceStart), 0,
                                                method::kVoiceStart, s.dim);
    for (size_t at = 0; at + s.frame_size <= audio.size(); at += s.frame_size) {
      auto frame = floats({audio.begin() + at, audio.begin() + at + s.frame_size}, {1, 1, static_cast<int>(s.frame_size)});
      auto encoded = floats_of(program_.run(Thread::kLanguageModel, method::kEncodeVoice, {*frame}), 0,
                               method::kEncodeVoice);
      if (encoded.size() % s.dim != 0) throw std::runtime_error("encode_voice gave conditioning of another width");
      conditioning.insert(conditioning.end(), encoded.begin(), encoded.end());
    }
  } catch (...) {
    program_.unload_encoder();
    throw;
  }
  program_.unload_encoder();
  return conditioning;
}

std::vector<float> Speaker::noise() {
  // The flow's starting point: normal with std sqrt(temperature), truncated to the clamp when the
  // config has one (drawn again until inside it); Box-Muller over the generator's doubles.
  const Settings& s = program_.settings();
  std::vector<float> values(s.latent_dim);
  double std = std::sqrt(temperature_);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (auto& v : values) {
    double x;
    do {
      double u1 = uniform(generator_), u2 = uniform(generator_);
      x = std * std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
    } while (s.noise_clamp && std::abs(x) > *s.noise_clamp);
    v = static_cast<float>(x);
  }
  return values;
}

void Speaker::prompt(const std::vector<float>& embeddings, int64_t count, int64_t first) {
  check_room(embeddings, count, first);
  condition(embeddings, count, first);
  noise();  // a prompt call draws noise in pocket-tts
}

Speaker::Frame Speaker::prompt_text(const std::vector<float>& embeddings, int64_t count, int64_t first) {
  const Settings& s = program_.settings();
  check_room(embeddings, count, first);
  const int64_t head = (count - 1) / s.prompt_tokens * s.prompt_tokens;  // the tokens of the calls before the last
  condition(embeddings, head, first);
  noise();
  const int64_t part = count - head;
  std::vector<float> values(embeddings.begin() + head * s.dim, embeddings.begin() + count * s.dim);
  std::vector<int64_t> places(part + 1);  // its tokens' positions, then the frame's
  std::iota(places.begin(), places.end(), first + head);
  auto input = floats(std::move(values), {1, static_cast<int>(part), static_cast<int>(s.dim)});
  auto positions = longs(std::move(places), {static_cast<int>(part + 1)});
  auto drawn = floats(noise(), {1, static_cast<int>(s.latent_dim)});
  auto name = method::kFirstFrame + std::to_string(s.block_for(s.prompt_blocks, first + count));
  auto outputs = program_.run(Thread::kLanguageModel, name, {*input, *positions, *drawn});
  return {floats_of(outputs, 0, name, s.latent_dim), floats_of(outputs, 1, name, 1)[0]};
}

void Speaker::check_room(const std::vector<float>& embeddings, int64_t count, int64_t first) const {
  const Settings& s = program_.settings();
  if (first + count > s.capacity) {
    throw UserError("the voice and text need positions up to " + std::to_string(first + count) +
                    "; the program holds " + std::to_string(s.capacity) +
                    " (lower it with a larger --capacity, or use a shorter voice)");
  }
  if (static_cast<int64_t>(embeddings.size()) < count * s.dim) throw std::runtime_error("conditioning cut short");
}

void Speaker::condition(const std::vector<float>& embeddings, int64_t count, int64_t first) {
  const Settings& s = program_.settings();
  const int64_t size = s.prompt_tokens, dim = s.dim;
  for (int64_t start = 0; start < count; start += size) {  // as many tokens a call as there are, up to size
    int64_t part = std::min(size, count - start);
    std::vector<float> values(embeddings.begin() + start * dim, embeddings.begin() + (start + part) * dim);
    std::vector<int64_t> places(part);
    std::iota(places.begin(), places.end(), first + start);
    auto input = floats(std::move(values), {1, static_cast<int>(part), static_cast<int>(dim)});
    auto positions = longs(std::move(places), {static_cast<int>(part)});
    int64_t block = s.block_for(s.prompt_blocks, first + start + part - 1);
    program_.run(Thread::kLanguageModel, method::kPrompt + std::to_string(block), {*input, *positions});
  }
}

void Speaker::load_state(const VoiceState& state) {
  const Settings& s = program_.settings();
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
  if (static_cast<int64_t>(state.values.size()) != s.layers * 2 * state.positions * row) {
    throw UserError("the voice state holds another number of values than its shape says");
  }
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
    program_.run(Thread::kLanguageModel, method::kLoadVoice, {*input, *positions});
  }
}

void Speaker::set_voice(const std::optional<std::string>& chosen, Report& report) {
  const Settings& s = program_.settings();
  double begin = now_ms(), loading = program_.load_ms();
  std::optional<std::string> voice = chosen ? chosen : s.default_voice;
  std::optional<VoiceState> state;
  std::vector<float> conditioning;  // an audio voice's: encoded before the speech methods load, so never both
  std::string described = "none";
  std::FILE* file = voice ? std::fopen(voice->c_str(), "rb") : nullptr;
  if (file != nullptr) std::fclose(file);
  if (!voice) {
    // none: the cache stays empty before the text
  } else if (s.voices.count(*voice)) {
    auto name = std::string(method::kVoice) + *voice;
    auto outputs = program_.run(Thread::kLanguageModel, name);
    auto values = floats_of(outputs, 0, name);
    const auto& tensor = outputs.at(0).toTensor();
    if (tensor.dim() != 5 || tensor.size(1) != 2 || tensor.size(2) != s.voices.at(*voice)) {
      throw std::runtime_error("the program's voice " + *voice + " is not a voice state of its shape");
    }
    state = VoiceState{std::move(values), tensor.size(0), tensor.size(2), tensor.size(3), tensor.size(4)};
    described = *voice + " (built in)";
  } else if (file != nullptr && ends_with(*voice, ".safetensors")) {
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
  program_.load_speech();
  voice_set_ = false;  // until the cache holds it
  program_.run(Thread::kLanguageModel, method::kClearCache);  // the cache holds numbers from here on
  voice_positions_ = 0;
  if (state) {
    load_state(*state);
    voice_positions_ = state->positions;
  } else if (!conditioning.empty()) {
    int64_t count = static_cast<int64_t>(conditioning.size()) / s.dim;
    prompt(conditioning, count, 0);
    voice_positions_ = count;
  }
  voice_ = chosen, voice_set_ = true, described_ = described;
  report.voice = described;
  report.voice_ms = now_ms() - begin - (program_.load_ms() - loading);
}

int64_t Speaker::count_tokens(const std::string& text) const {
  return static_cast<int64_t>(tokenizer_->encode(prepare_text_prompt(text, settings().text).first).size());
}

bool Speaker::fits(int64_t tokens) const {
  const Settings& s = settings();
  return tokens <= s.max_text_tokens && voice_positions_ + tokens + s.max_generated_frames(tokens) <= s.capacity;
}

std::vector<std::string> Speaker::fitting(const std::string& piece) const {
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
                      std::to_string(settings().capacity) + " positions: no room for '" + word +
                      "' and its frames (lower it with a larger --capacity, or use a shorter voice)");
    }
    current += (current.empty() ? "" : " ") + word;
  }
  parts.push_back(current);
  return parts;
}

std::vector<Speaker::Chunk> Speaker::chunks(const std::string& text,
                                           const std::optional<int64_t>& frames_after_eos) const {
  const Settings& s = settings();
  std::vector<Chunk> out;
  try {
    for (const auto& piece : split_into_best_sentences(*tokenizer_, text, static_cast<int>(s.max_tokens_per_chunk), s.text)) {
      auto parts = fitting(piece);
      for (const auto& part : parts) {
        auto [chunk, guess] = prepare_text_prompt(part, s.text);
        out.push_back({chunk, frames_after_eos.value_or(s.frames_after_eos.value_or(guess + 2)), parts.size() > 1});
      }
    }
  } catch (const std::invalid_argument& error) {
    throw UserError("nothing to say in '" + text + "': " + error.what());
  }
  return out;
}

std::string Speaker::unknown_characters(const std::string& text) const {
  const Settings& s = settings();
  std::u32string seen, unknown;
  for (char32_t c : to_utf32(text)) {
    auto replaced = s.text.replace_characters.find(std::u32string(1, c));
    std::u32string as_read = replaced == s.text.replace_characters.end() ? std::u32string(1, c) : replaced->second;
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

void Speaker::speak(const std::string& text, const Sampling& sampling, const FrameSink& sink, Report& report) {
  const Settings& s = settings();
  temperature_ = sampling.temperature;
  generator_.seed(sampling.seed);
  stopping_ = false;
  program_.load_speech();
  double started = now_ms();
  auto planned = chunks(text, sampling.frames_after_eos);
  decoder_.start(&sink, &report.decoder, started);
  try {
    for (const auto& chunk : planned) {
      report.split_chunks += chunk.split;
      std::vector<int64_t> tokens = tokenizer_->encode(chunk.text);
      const int64_t count = static_cast<int64_t>(tokens.size());
      report.prompt_tokens += count;
      decoder_.reset();
      double begin = now_ms();
      auto ids = longs(tokens, {1, static_cast<int>(count)});
      auto embedded = floats_of(program_.run(Thread::kLanguageModel, method::kEmbedText, {*ids}), 0,
                                method::kEmbedText, count * s.dim);
      auto [latent, eos_logit] = prompt_text(embedded, count, voice_positions_);  // and the first frame
      report.prompt_ms.push_back(now_ms() - begin);
      std::optional<int64_t> eos_frame;
      int64_t first = voice_positions_ + count;
      for (int64_t step = 0; step < s.max_generated_frames(count) && !decoder_.ended() && !stopping_; ++step) {
        if (step > 0) {
          int64_t position = first + step;
          begin = now_ms();
          auto input = floats(latent, {1, 1, static_cast<int>(s.latent_dim)});
          auto flag = floats({0.0f}, {1});
          auto drawn = floats(noise(), {1, static_cast<int>(s.latent_dim)});
          auto where = longs({position}, {1});
          auto name = method::kGenerate + std::to_string(s.block_for(s.generate_blocks, position));
          auto outputs = program_.run(Thread::kLanguageModel, name, {*input, *flag, *drawn, *where});
          latent = floats_of(outputs, 0, name, s.latent_dim);
          eos_logit = floats_of(outputs, 1, name, 1)[0];
          report.lm_ms.push_back(now_ms() - begin);
        }
        if (eos_logit > sampling.eos_threshold && !eos_frame && step >= s.min_frames_before_eos) eos_frame = step;
        if (eos_frame && step >= *eos_frame + chunk.frames_after_eos) break;
        decoder_.decode(latent);
      }
      report.eos_frames.push_back(eos_frame);
      report.chunks += 1;
      if (decoder_.ended() || stopping_) break;
    }
  } catch (...) {
    decoder_.end();  // the decoder's thread drops what is queued: the sink is the caller's, who may leave
    decoder_.finish();
    throw;
  }
  auto failure = decoder_.finish();
  report.total_ms = now_ms() - started;
  report.stopped = stopping_;
  report.refused = decoder_.ended() && !stopping_ && !failure;
  if (failure) throw std::runtime_error(*failure);
}

}  // namespace phaseconv
