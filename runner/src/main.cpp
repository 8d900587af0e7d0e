// phaseconv-tts PROGRAM "text" [--voice NAME|FILE.safetensors|FILE.wav] [--temperature T] [--seed N]
//               [--eos-threshold X] [--frames-after-eos N] [--threads N] [--tokenizer FILE] [--stream] [-o out.wav] [--json summary.json]
//
// Speaks through a text-to-speech program from `phaseconv lower pocket-tts-tts:CONFIG`, as
// `phaseconv tts` does: the summary goes to stderr, --stream writes 16-bit mono PCM to stdout as
// each frame is decoded (| aplay -f S16_LE -r 24000 -c 1). Bad input: one line and exit status 2.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <locale>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <executorch/runtime/platform/platform.h>

#include <phaseconv/tts.h>

#include "audio.h"
#include "text.h"

namespace {

// The runtime's log lines (its CPU probing on load, a method that fails) stay out of stderr, which
// carries the summary or one line of error; PHASECONV_TTS_LOG=1 lets them through.
void quiet_log(et_timestamp_t, et_pal_log_level_t, const char*, const char*, size_t, const char*, size_t) {}

// Bad input, said in one line: exit status 2.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string program, text;
  std::optional<std::string> voice, tokenizer, output, json;
  std::optional<double> temperature, eos_threshold;
  std::optional<int64_t> frames_after_eos;
  uint64_t seed = 0;
  int threads = 1;
  bool stream = false;
};

const char* kUsage =
    "usage: phaseconv-tts PROGRAM TEXT [--voice NAME|FILE.safetensors|FILE.wav] [--temperature T] [--seed N] "
    "[--eos-threshold X] [--frames-after-eos N] [--threads N] [--tokenizer FILE] [--stream] [-o out.wav] [--json summary.json]";

template <typename T>
T number(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    T value = std::is_integral_v<T> ? static_cast<T>(std::stoll(text, &used)) : static_cast<T>(std::stod(text, &used));
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw UserError(flag + " takes a number, got '" + text + "'");
}

Options parse(int argc, char** argv) {
  Options options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UserError(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--voice") options.voice = value();
    else if (flag == "--tokenizer") options.tokenizer = value();
    else if (flag == "-o" || flag == "--output") options.output = value();
    else if (flag == "--json") options.json = value();
    else if (flag == "--temperature") options.temperature = number<double>(flag, value());
    else if (flag == "--eos-threshold") options.eos_threshold = number<double>(flag, value());
    else if (flag == "--frames-after-eos") options.frames_after_eos = number<int64_t>(flag, value());
    else if (flag == "--seed") options.seed = number<uint64_t>(flag, value());
    else if (flag == "--threads") options.threads = number<int>(flag, value());
    else if (flag == "--stream") options.stream = true;
    else if (flag == "-h" || flag == "--help") throw UserError(kUsage);
    else if (flag.size() > 1 && flag[0] == '-') throw UserError("no option " + flag + "; " + kUsage);
    else positional.push_back(flag);
  }
  if (positional.size() != 2) throw UserError(kUsage);
  options.program = positional[0], options.text = positional[1];
  if (options.threads < 1) throw UserError("--threads takes a number of at least 1");
  if (options.temperature && *options.temperature < 0) throw UserError("the temperature must be 0 or more");
  if (options.stream == options.output.has_value()) {
    throw UserError("say where the audio goes: either --stream (stdout) or -o out.wav");
  }
  return options;
}

// The folder a file will be written to exists: checked before any work, as phaseconv does.
void require_folder(const std::string& path) {
  std::string folder = path.find('/') == std::string::npos ? "." : path.substr(0, path.find_last_of('/'));
  if (folder.empty()) folder = "/";
  if (access(folder.c_str(), W_OK) != 0) {
    throw UserError("cannot write " + path + ": the folder " + folder + " does not exist");
  }
}

// `content` to a temporary file beside `path`, renamed to it: a failure leaves no partial file.
void write_atomically(const std::string& path, const std::string& content) {
  std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  bool written = file != nullptr && std::fwrite(content.data(), 1, content.size(), file) == content.size();
  if (file != nullptr) written = std::fclose(file) == 0 && written;
  if (!written || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw UserError("cannot write " + path);
  }
}

bool blank(const std::string& text) {
  for (char32_t c : phaseconv::to_utf32(text)) {
    if (!phaseconv::is_space(c)) return false;
  }
  return true;
}

// An Error from the library as this program says it: one line, status 2.
void require(phaseconv::tts::Error error, const phaseconv::tts::Runner& runner) {
  if (error != phaseconv::tts::Error::Ok) throw UserError(runner.error_message());
}

int run(int argc, char** argv) {
  Options options = parse(argc, argv);
  for (const auto& path : {options.output, options.json}) {
    if (path) require_folder(*path);
  }
  if (blank(options.text)) throw UserError("the text is empty");
  phaseconv::tts::Runner runner(options.program, {options.threads, options.tokenizer});
  require(runner.load(), runner);
  const auto& info = runner.info();
  std::string unknown = runner.unknown_characters(options.text);
  if (!unknown.empty()) {
    std::fprintf(stderr, "the tokenizer reads %s as its unknown piece (pocket-tts speaks it so)\n", unknown.c_str());
  }
  std::string pcm;
  bool refused = false;
  auto sink = [&](const float* samples, size_t count) {
    std::string bytes = phaseconv::to_pcm16(samples, count);
    if (!options.stream) {
      pcm += bytes;
      return true;
    }
    refused = std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0;
    return !refused;
  };
  phaseconv::tts::Stats stats;
  phaseconv::tts::GenerationConfig config{options.voice, options.temperature, options.seed, options.eos_threshold,
                                          options.frames_after_eos};
  require(runner.generate(options.text, config, sink, [&](const auto& measured) { stats = measured; }), runner);
  if (refused) return 1;  // the reader went away: nothing to say about it
  if (options.output) write_atomically(*options.output, phaseconv::wav_bytes(pcm, static_cast<int>(info.sample_rate)));
  if (options.json) write_atomically(*options.json, stats.to_json());
  std::string split = stats.split_chunks ? "; " + std::to_string(stats.split_chunks) +
                                               " chunk(s) split at words to fit the cache"
                                         : "";
  std::fprintf(stderr,
               "%lld frames (%.2f s of audio, %lld chunk(s)) in voice %s at %d thread(s), LM %s, decoder %s, decoder "
               "on its own thread: first audio %.1f ms after the text, per frame median LM %.2f ms + decoder %.2f ms, "
               "real-time factor %.3f%s\n",
               static_cast<long long>(stats.frames), stats.audio_seconds(), static_cast<long long>(stats.chunks),
               stats.voice.c_str(), options.threads, stats.lm_precision.c_str(), stats.decoder_precision.c_str(),
               stats.first_audio_ms, stats.lm_median_ms.value_or(NAN), stats.decode_median_ms.value_or(NAN),
               stats.real_time_factor(), split.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a reader that closes the pipe ends the run through a failed write
  std::setlocale(LC_CTYPE, "C.UTF-8");  // towupper and iswupper on every script, as Python's str does
  const char* log = std::getenv("PHASECONV_TTS_LOG");
  if (log == nullptr || std::strcmp(log, "1") != 0) {
    executorch::runtime::register_pal(executorch::runtime::PalImpl::create(quiet_log, __FILE__));
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "phaseconv-tts: error: %s\n", error.what());
    return 2;
  }
}
