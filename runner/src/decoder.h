// The decoder's thread: resets and latents in the order they were queued, each frame handed to the
// sink from here. A chunk's latents go in calls of several frames (decode_N reads the decoder's weights
// once for them) once the audio given out plays far enough ahead that waiting for them cannot make it
// late (decode_size); until then each as it comes: the first frame of an utterance never waits. A
// failure ends the utterance: the jobs left are dropped, and the error waits for the thread that
// queued them.
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

#include "decode_size.h"
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
  // A latent to decode; the utterance's first returns once its audio is out: on one core the language
  // model's next frame would share it with the decoder and delay the first audio.
  void decode(std::vector<float> latent);
  // No more frames wanted (the sink refused one, stop() was called, or decoding failed).
  bool ended() const { return ended_; }
  // Drop what is queued, and every frame from now until the next start().
  void end();
  // Every job queued so far done (or dropped); the decoding's failure, if it failed.
  std::optional<std::string> finish();

 private:
  struct Job {
    enum Kind { kReset, kLatent, kEnd } kind;  // kEnd: no more latents in the chunk
    std::vector<float> latent;
  };
  void push(Job job);
  void loop();
  void work(std::vector<Job> batch, bool& first_of_chunk, const std::vector<float>& fade);
  // How far the audio given out runs ahead of its playback, were playback to start with its first frame.
  double ahead_ms() const;

  Program& program_;
  const double frame_ms_;
  const FrameSink* sink_ = nullptr;
  DecoderReport* report_ = nullptr;
  double started_ = 0;
  std::atomic<bool> ended_{false};
  std::optional<std::string> failure_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Job> jobs_;
  bool stopping_ = false, busy_ = false;
  bool first_latent_ = false;  // the caller's: no latent of this utterance decoded yet
  std::thread thread_;  // last: it starts once the members above are ready
};


}  // namespace phaseconv
