#include "decoder.h"

#include <executorch/extension/tensor/tensor.h>

#include <algorithm>
#include <chrono>

#include "audio.h"
#include "contract.h"

namespace phaseconv {

namespace method = contract::method;

Decoder::Decoder(Program& program)
    : program_(program),
      frame_ms_(1e3 * static_cast<double>(program.settings().frame_size) / program.settings().sample_rate),
      thread_([this] { loop(); }) {}

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
  first_latent_ = true;
}

void Decoder::reset() { push({Job::kReset, {}}); }

void Decoder::decode(std::vector<float> latent) {
  push({Job::kLatent, std::move(latent)});
  if (!first_latent_) return;
  first_latent_ = false;
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return jobs_.empty() && !busy_; });
}

void Decoder::end() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
    jobs_.clear();
  }
  done_.notify_all();
}

std::optional<std::string> Decoder::finish() {
  push({Job::kEnd, {}});  // the last chunk has no more latents to wait for
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

double Decoder::ahead_ms() const {
  if (report_ == nullptr || report_->frames == 0) return 0.0;
  return started_ + report_->first_audio_ms + report_->frames * frame_ms_ - now_ms();
}

void Decoder::loop() {
  const Settings& s = program_.settings();
  std::vector<float> fade = linspace(0.0f, 1.0f, static_cast<int>(s.sample_rate / 200));  // the 5 ms fade-in
  bool first_of_chunk = false;
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        if (stopping_) return;
        auto is_latent = [](const Job& j) { return j.kind == Job::kLatent; };
        int64_t latents = std::find_if_not(jobs_.begin(), jobs_.end(), is_latent) - jobs_.begin();
        if (latents == 0 && !jobs_.empty()) {
          batch.push_back(std::move(jobs_.front()));
          jobs_.pop_front();
          break;
        }
        if (latents == 0) {
          wake_.wait(lock);
          continue;
        }
        double ahead = ahead_ms();
        bool complete = latents < static_cast<int64_t>(jobs_.size());  // a reset or the end follows them
        int64_t frames = decode_size(latents, s.decode_frames, ahead, frame_ms_, complete);
        if (frames > 0) {
          for (int64_t i = 0; i < frames; ++i, jobs_.pop_front()) batch.push_back(std::move(jobs_.front()));
          break;
        }
        // wait for more latents, at most until waiting longer could make the audio late
        auto late = std::chrono::duration<double, std::milli>(ahead - s.decode_frames.front() * frame_ms_);
        wake_.wait_for(lock, late);
      }
      busy_ = true;
    }
    std::optional<std::string> failed;  // never out of the thread: the utterance ends with it
    try {
      work(std::move(batch), first_of_chunk, fade);
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

void Decoder::work(std::vector<Job> batch, bool& first_of_chunk, const std::vector<float>& fade) {
  const Settings& s = program_.settings();
  if (batch.front().kind == Job::kReset) {
    double begin = now_ms();
    program_.run(Program::Thread::kDecoder, method::kResetDecoder);
    report_->reset_ms = now_ms() - begin;
    first_of_chunk = true;
    return;
  }
  if (batch.front().kind == Job::kEnd || ended_) return;
  const int frames = static_cast<int>(batch.size());
  std::vector<float> latents;
  latents.reserve(frames * s.latent_dim);
  for (const auto& job : batch) latents.insert(latents.end(), job.latent.begin(), job.latent.end());
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
