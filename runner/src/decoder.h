// The decoder's thread: resets and latents in the order they were queued, the latents queued while it
// decoded the last ones decoded at once (decode_N, as pocket-tts's decoder thread does; the first
// frame of a chunk never waits), each frame handed to the sink from here. A failure ends the
// utterance: the jobs left are dropped, and the error waits for the thread that queued them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "program.h"

namespace phaseconv {

// Receives each decoded frame's samples; returns false when the audio has nowhere to go (a closed
// pipe, or the caller wants no more), which ends the run.
using FrameSink = std::function<bool(const float* samples, size_t count)>;

// What the decoder's thread measured of an utterance.
struct DecoderReport {
  int64_t frames = 0, decode_calls = 0;
  double first_audio_ms = 0, reset_ms = 0;
  std::vector<double> decode_ms;
};

class Decoder {
 public:
  explicit Decoder(Program& program);
  ~Decoder();

  // An utterance begins: its frames go to `sink`, its times to `report`, measured from `started`.
  void start(const FrameSink* sink, DecoderReport* report, double started);
  void reset();
  void decode(std::vector<float> latent);
  // No more frames wanted (the sink refused one, stop() was called, or decoding failed).
  bool ended() const { return ended_; }
  // Drop what is queued, and every frame from now until the next start().
  void end();
  // Every job queued so far done (or dropped); the decoding's failure, if it failed.
  std::optional<std::string> finish();

 private:
  struct Job {
    bool reset;
    std::vector<float> latent;
  };
  void push(Job job);
  void loop();
  void work(Job job, bool& first_of_chunk, const std::vector<float>& fade);

  Program& program_;
  const FrameSink* sink_ = nullptr;
  DecoderReport* report_ = nullptr;
  double started_ = 0;
  std::atomic<bool> ended_{false};
  std::optional<std::string> failure_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  bool stopping_ = false, busy_ = false;
  std::thread thread_;  // last: it starts once the members above are ready
};


}  // namespace phaseconv
