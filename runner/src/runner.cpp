// The library's boundary: every call into the runner, its exceptions turned into an Error and a message.
#include <phaseconv/tts.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <new>

#include "speaker.h"

namespace phaseconv::tts {
namespace {

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

nlohmann::json or_null(const std::optional<double>& value) { return value ? nlohmann::json(*value) : nlohmann::json(); }

}  // namespace

struct Runner::State {
  std::string path;
  RunnerOptions options;
  std::unique_ptr<Speaker> speaker;
  ProgramInfo info;
  std::string error;
  std::mutex stopping;  // stop() from another thread, while the speaker may be made or unmade

  // `work` run, its exceptions said as an Error and a message.
  template <typename Work>
  Error guarded(Work&& work) {
    try {
      error.clear();
      work();
      return Error::Ok;
    } catch (const UserError& failure) {
      error = failure.what();
      return error.rfind("no such", 0) == 0 ? Error::NotFound : Error::InvalidArgument;
    } catch (const std::bad_alloc&) {
      error = "out of memory";
      return Error::MemoryAllocationFailed;
    } catch (const std::exception& failure) {
      error = failure.what();
      return Error::Internal;
    } catch (...) {
      error = "an unknown failure";
      return Error::Internal;
    }
  }
};

double Stats::audio_seconds() const {
  return sample_rate ? static_cast<double>(frames * samples_per_frame) / sample_rate : 0.0;
}

double Stats::real_time_factor() const { return frames ? total_ms / 1e3 / audio_seconds() : INFINITY; }

std::string Stats::to_json() const {
  nlohmann::json eos = nlohmann::json::array();
  for (const auto& frame : eos_frames) eos.push_back(frame ? nlohmann::json(*frame) : nlohmann::json());
  nlohmann::json json = {
      {"frames", frames},
      {"chunks", chunks},
      {"sample_rate", sample_rate},
      {"samples_per_frame", samples_per_frame},
      {"load_ms", load_ms},
      {"first_audio_ms", first_audio_ms},
      {"voice_ms", voice_ms},
      {"reset_ms", reset_ms},
      {"voice", voice},
      {"eos_frames", eos},
      {"split_chunks", split_chunks},
      {"decode_calls", decode_calls},
      {"prompt_tokens", prompt_tokens},
      {"lm_median_ms", or_null(lm_median_ms)},
      {"decode_median_ms", or_null(decode_median_ms)},
      {"prompt_median_ms", or_null(prompt_median_ms)},
      {"total_ms", total_ms},
      {"audio_seconds", audio_seconds()},
      {"real_time_factor", frames ? nlohmann::json(real_time_factor()) : nlohmann::json()},
      {"threads", threads},
      {"pipeline", true},
      {"stopped", stopped},
      {"precision", {{"lm", lm_precision}, {"decoder", decoder_precision}}},
  };
  return json.dump(2);
}

std::string observer_line(const Stats& stats) {
  return "PyTorchObserver " + nlohmann::json::parse(stats.to_json()).dump();
}

Runner::Runner(std::string program, RunnerOptions options) : state_(std::make_unique<State>()) {
  state_->path = std::move(program), state_->options = std::move(options);
}

Runner::~Runner() = default;

bool Runner::is_loaded() const { return state_->speaker != nullptr; }
const ProgramInfo& Runner::info() const { return state_->info; }
const std::string& Runner::error_message() const { return state_->error; }

Error Runner::load() {
  if (is_loaded()) return Error::Ok;
  return state_->guarded([&] {
    if (state_->options.threads < 1) throw UserError("threads must be at least 1");
    set_threads(state_->options.threads);
    auto speaker = std::make_unique<Speaker>(state_->path, state_->options.tokenizer);
    speaker->load_speech();
    const Settings& s = speaker->settings();
    ProgramInfo& info = state_->info;
    info = {s.config, s.weights, s.sample_rate, s.frame_size, s.capacity, s.temperature, s.eos_threshold, {},
            s.default_voice, s.quantize.value_or("fp32"), s.quantize_decoder.value_or("fp32"), s.voice_cloning};
    for (const auto& [name, _] : s.voices) info.voices.push_back(name);
    std::lock_guard<std::mutex> lock(state_->stopping);
    state_->speaker = std::move(speaker);
  });
}

Error Runner::generate(const std::string& text, const GenerationConfig& config, const PcmCallback& on_pcm,
                       const StatsCallback& on_stats) {
  if (Error loaded = load(); loaded != Error::Ok) return loaded;
  Speaker& speaker = *state_->speaker;
  return state_->guarded([&] {
    const Settings& s = speaker.settings();
    double temperature = config.temperature.value_or(s.temperature);
    if (!(temperature >= 0 && std::isfinite(temperature))) throw UserError("the temperature must be 0 or more");
    Report report;
    if (!speaker.voice_set() || speaker.voice() != config.voice) speaker.set_voice(config.voice, report);
    else report.voice = speaker.voice_described();
    double loaded = speaker.load_ms();
    if (config.frames_after_eos && *config.frames_after_eos < 0) throw UserError("frames after the end of speech: 0 or more");
    Sampling sampling{temperature, config.eos_threshold.value_or(s.eos_threshold), config.frames_after_eos, config.seed};
    speaker.speak(text, sampling, [&](const float* samples, size_t count) { return on_pcm(samples, count); }, report);
    Stats stats;
    stats.frames = report.decoder.frames, stats.chunks = report.chunks, stats.split_chunks = report.split_chunks;
    stats.decode_calls = report.decoder.decode_calls, stats.prompt_tokens = report.prompt_tokens;
    stats.sample_rate = s.sample_rate, stats.samples_per_frame = s.frame_size, stats.threads = state_->options.threads;
    stats.load_ms = loaded, stats.voice_ms = report.voice_ms, stats.first_audio_ms = report.decoder.first_audio_ms;
    stats.reset_ms = report.decoder.reset_ms, stats.total_ms = report.total_ms;
    stats.lm_median_ms = median(report.lm_ms), stats.decode_median_ms = median(report.decoder.decode_ms);
    stats.prompt_median_ms = median(report.prompt_ms);
    stats.voice = report.voice, stats.eos_frames = report.eos_frames, stats.stopped = report.stopped;
    stats.lm_precision = state_->info.lm_precision, stats.decoder_precision = state_->info.decoder_precision;
    if (on_stats) on_stats(stats);
  });
}

void Runner::stop() {
  std::lock_guard<std::mutex> lock(state_->stopping);
  if (state_->speaker) state_->speaker->stop();
}

void Runner::reset() {
  if (state_->speaker) state_->speaker->forget_voice();
}

std::string Runner::unknown_characters(const std::string& text) const {
  try {
    return state_->speaker ? state_->speaker->unknown_characters(text) : "";
  } catch (const std::exception&) {  // a text that is not UTF-8: generate() says so
    return "";
  }
}

}  // namespace phaseconv::tts
