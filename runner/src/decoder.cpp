#include "decoder.h"

#include <executorch/extension/tensor/tensor.h>

#include <algorithm>

#include "audio.h"
#include "contract.h"

namespace phaseconv {

namespace method = contract::method;

Decoder::Decoder(Program& program) : program_(program), thread_([this] { loop(); }) {}

Decoder::~Decoder() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void Decoder::start(const FrameSink* sink, DecoderReport* report, double started) {
  std::lock_guard<std::mutex> lock(mutex_);
  sink_ = sink, report_ = report, started_ = started, ended_ = false, failure_.reset();
}

void Decoder::reset() { push({true, {}}); }
void Decoder::decode(std::vector<float> latent) { push({false, std::move(latent)}); }

void Decoder::end() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
    jobs_.clear();
  }
  done_.notify_all();
}

std::optional<std::string> Decoder::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return jobs_.empty() && !busy_; });
  return failure_;
}

void Decoder::push(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ended_) return;
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void Decoder::loop() {
  const Settings& s = program_.settings();
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
    std::optional<std::string> failed;  // never out of the thread: the utterance ends with it
    try {
      work(std::move(job), first_of_chunk, fade);
    } catch (const std::exception& error) {
      failed = std::string("decoding failed: ") + error.what();
    } catch (...) {
      failed = "decoding failed";
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      if (failed) failure_ = failed, ended_ = true, jobs_.clear();
    }
    done_.notify_all();
  }
}

void Decoder::work(Job job, bool& first_of_chunk, const std::vector<float>& fade) {
  const Settings& s = program_.settings();
  if (job.reset) {
    double begin = now_ms();
    program_.run(Program::Thread::kDecoder, method::kResetDecoder);
    report_->reset_ms = now_ms() - begin;
    first_of_chunk = true;
    return;
  }
  if (ended_) return;
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
  auto input = executorch::extension::make_tensor_ptr<float>({1, frames, static_cast<int>(s.latent_dim)},
                                                             std::move(latents));
  std::string name = frames == 1 ? method::kDecode : method::kDecodeFrames + std::to_string(frames);
  auto outputs = program_.run(Program::Thread::kDecoder, name, {*input});
  const auto& audio = outputs.at(0).toTensor();
  if (audio.numel() != frames * s.frame_size) throw std::runtime_error(name + " gave audio of another size");
  std::vector<float> pcm(audio.const_data_ptr<float>(), audio.const_data_ptr<float>() + audio.numel());
  double each = (now_ms() - begin) / frames;
  report_->decode_calls += 1;
  for (int frame = 0; frame < frames && !ended_; ++frame) {
    float* samples = pcm.data() + frame * s.frame_size;
    if (first_of_chunk) {
      for (size_t i = 0; i < fade.size() && i < static_cast<size_t>(s.frame_size); ++i) samples[i] *= fade[i];
    }
    first_of_chunk = false;
    report_->decode_ms.push_back(each);
    if (report_->frames++ == 0) report_->first_audio_ms = now_ms() - started_;
    if (!(*sink_)(samples, s.frame_size)) end();
  }
}

}  // namespace phaseconv
