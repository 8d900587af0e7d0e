// phaseconv-tts-api-check PROGRAM: the library's promises that only a caller in C++ can test, each
// said as a line "name: ok" or "name: FAILED ...", exit 1 when any failed.
//   stop: stop() from another thread ends generate() within one frame, with Error::Ok;
//   decoder-failure: a failure in the decoder's thread (a callback that throws there) returns an
//     error, and the next generate() speaks normally;
//   errors: bad input returns an error and a message, never an exception or an abort.
#include <phaseconv/tts.h>

#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

using phaseconv::tts::Error;
int failures = 0;

void say(const char* name, bool ok, const std::string& detail = "") {
  std::printf("%s: %s%s\n", name, ok ? "ok" : "FAILED ", ok ? "" : detail.c_str());
  failures += !ok;
}

const char* kLong = "Here is a sentence the runner will not finish. It goes on, and on, and on, and it has more to say.";

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: phaseconv-tts-api-check PROGRAM\n");
    return 2;
  }
  phaseconv::tts::Runner runner(argv[1]);
  if (runner.load() != Error::Ok) {
    std::fprintf(stderr, "%s\n", runner.error_message().c_str());
    return 2;
  }
  phaseconv::tts::GenerationConfig config;
  config.temperature = 0.0, config.eos_threshold = 1e30;  // no end of speech: the text runs long

  {  // stop: from another thread, after the third frame; at most one more frame comes
    std::atomic<int> frames{0}, after_stop{0};
    std::atomic<bool> stopped{false};
    std::thread stopper;
    phaseconv::tts::Stats stats;
    Error error = runner.generate(
        kLong, config,
        [&](const float*, size_t) {
          if (stopped) ++after_stop;
          if (++frames == 3) stopper = std::thread([&] { runner.stop(), stopped = true; });
          return true;
        },
        [&](const phaseconv::tts::Stats& measured) { stats = measured; });
    if (stopper.joinable()) stopper.join();
    say("stop", error == Error::Ok && stats.stopped && after_stop <= 1 && frames >= 3,
        "error " + std::to_string(static_cast<int>(error)) + ", " + std::to_string(after_stop) +
            " frames after stop(), stopped " + std::to_string(stats.stopped));
  }
  {  // decoder-failure: the callback throws on the decoder's thread
    int frames = 0;
    Error error = runner.generate("A first sentence.", config, [&](const float*, size_t) -> bool {
      if (++frames == 2) throw std::runtime_error("the sink broke");
      return true;
    });
    bool failed = error == Error::Internal && runner.error_message().find("the sink broke") != std::string::npos;
    config.eos_threshold.reset();
    int64_t heard = 0;
    Error again = runner.generate("And then a second one.", config, [&](const float*, size_t count) {
      heard += static_cast<int64_t>(count);
      return true;
    });
    say("decoder-failure", failed && again == Error::Ok && heard > 0 && runner.error_message().empty(),
        "first: " + runner.error_message() + "; second: error " + std::to_string(static_cast<int>(again)));
  }
  {  // errors: each a return value and a message
    auto silent = [](const float*, size_t) { return true; };
    phaseconv::tts::GenerationConfig bad;
    bad.voice = "no-such-voice";
    Error voice = runner.generate("Hi.", bad, silent);
    std::string voice_message = runner.error_message();
    Error blank = runner.generate("  ", {}, silent);
    phaseconv::tts::Runner missing("/no/such/program.pte");
    Error absent = missing.load();
    say("errors",
        voice == Error::InvalidArgument && voice_message.find("no voice") != std::string::npos &&
            blank == Error::InvalidArgument && absent == Error::NotFound && !missing.is_loaded(),
        "voice: " + voice_message + "; blank: " + std::to_string(static_cast<int>(blank)) +
            "; missing: " + missing.error_message());
  }
  return failures ? 1 : 0;
}
