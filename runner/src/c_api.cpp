// The C API over phaseconv::tts::Runner: statuses for Errors, and nothing thrown across.
#include <phaseconv/tts.h>
#include <phaseconv/tts_c.h>

#include <cmath>
#include <new>
#include <string>

struct phaseconv_tts {
  phaseconv::tts::Runner runner;
  std::string stats;
  std::string error;
};

namespace {

phaseconv_tts_status status_of(executorch::runtime::Error error) {
  switch (error) {
    case executorch::runtime::Error::Ok: return PHASECONV_TTS_OK;
    case executorch::runtime::Error::NotFound: return PHASECONV_TTS_NOT_FOUND;
    case executorch::runtime::Error::InvalidArgument:
    case executorch::runtime::Error::InvalidProgram: return PHASECONV_TTS_INVALID_ARGUMENT;
    default: return PHASECONV_TTS_FAILED;
  }
}

phaseconv_tts_status refuse(phaseconv_tts* tts, const char* message) {
  if (tts != nullptr) tts->error = message;
  return PHASECONV_TTS_INVALID_ARGUMENT;
}

}  // namespace

extern "C" {

phaseconv_tts_config phaseconv_tts_default_config(void) { return {nullptr, -1.0, 0, NAN, -1}; }

phaseconv_tts* phaseconv_tts_create(const char* program_path, int threads, const char* tokenizer_path) {
  try {
    phaseconv::tts::RunnerOptions options;
    options.threads = threads;
    if (tokenizer_path != nullptr) options.tokenizer = tokenizer_path;
    return new phaseconv_tts{phaseconv::tts::Runner(program_path ? program_path : "", options), {}, {}};
  } catch (...) {
    return nullptr;
  }
}

phaseconv_tts_status phaseconv_tts_load(phaseconv_tts* tts) {
  if (tts == nullptr) return PHASECONV_TTS_INVALID_ARGUMENT;
  auto status = status_of(tts->runner.load());
  tts->error = tts->runner.error_message();
  return status;
}

int phaseconv_tts_sample_rate(const phaseconv_tts* tts) {
  return tts != nullptr && tts->runner.is_loaded() ? static_cast<int>(tts->runner.info().sample_rate) : 0;
}

phaseconv_tts_status phaseconv_tts_speak(phaseconv_tts* tts, const char* text, const phaseconv_tts_config* config,
                                         phaseconv_tts_pcm_callback on_pcm, void* user) {
  if (tts == nullptr) return PHASECONV_TTS_INVALID_ARGUMENT;
  if (text == nullptr || on_pcm == nullptr) return refuse(tts, "phaseconv_tts_speak needs a text and a callback");
  try {
    phaseconv_tts_config given = config != nullptr ? *config : phaseconv_tts_default_config();
    phaseconv::tts::GenerationConfig generation;
    if (given.voice != nullptr) generation.voice = given.voice;
    if (given.temperature >= 0) generation.temperature = given.temperature;
    if (!std::isnan(given.eos_threshold)) generation.eos_threshold = given.eos_threshold;
    if (given.frames_after_eos >= 0) generation.frames_after_eos = given.frames_after_eos;
    generation.seed = given.seed;
    tts->stats.clear();
    auto status = status_of(tts->runner.generate(
        text, generation, [&](const float* samples, size_t count) { return on_pcm(samples, count, user) != 0; },
        [&](const phaseconv::tts::Stats& stats) { tts->stats = stats.to_json(); }));
    tts->error = tts->runner.error_message();
    return status;
  } catch (...) {  // memory for the config's strings
    tts->error = "out of memory";
    return PHASECONV_TTS_FAILED;
  }
}

void phaseconv_tts_stop(phaseconv_tts* tts) {
  if (tts != nullptr) tts->runner.stop();
}

const char* phaseconv_tts_error(const phaseconv_tts* tts) { return tts != nullptr ? tts->error.c_str() : ""; }

const char* phaseconv_tts_stats_json(const phaseconv_tts* tts) { return tts != nullptr ? tts->stats.c_str() : ""; }

void phaseconv_tts_destroy(phaseconv_tts* tts) { delete tts; }

}  // extern "C"
