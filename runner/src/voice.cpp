#include "voice.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "audio.h"

namespace phaseconv {

VoiceState read_voice_state(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("no such voice file: " + path);
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string not_a_state = path + " is not a pocket-tts voice state";
  uint64_t header_size = 0;
  if (data.size() < 8) throw std::runtime_error(not_a_state);
  std::memcpy(&header_size, data.data(), 8);
  if (header_size > data.size() - 8) throw std::runtime_error(not_a_state);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data.substr(8, header_size));
  } catch (const std::exception&) {
    throw std::runtime_error(not_a_state);
  }
  const char* tensors = data.data() + 8 + header_size;
  auto layer = [](int64_t n) { return "transformer.layers." + std::to_string(n) + ".self_attn/"; };
  VoiceState state;
  std::vector<std::pair<const float*, int64_t>> caches;  // each layer's cache and its filled positions
  int64_t total = 0;
  for (; header.contains(layer(state.layers) + "cache"); ++state.layers) {
    const auto& cache = header[layer(state.layers) + "cache"];
    auto shape = cache.at("shape").get<std::vector<int64_t>>();
    if (cache.at("dtype") != "F32" || shape.size() != 5 || shape[0] != 2 || shape[1] != 1) {
      throw std::runtime_error(not_a_state + ": its cache is not float32 [2, 1, T, H, D]");
    }
    int64_t filled = 0;
    if (header.contains(layer(state.layers) + "offset")) {
      const auto& offset = header[layer(state.layers) + "offset"];
      std::memcpy(&filled, tensors + offset.at("data_offsets")[0].get<size_t>(), 8);
    } else if (header.contains(layer(state.layers) + "current_end")) {  // older files: its length
      filled = header[layer(state.layers) + "current_end"].at("shape")[0].get<int64_t>();
    } else {
      throw std::runtime_error(not_a_state + ": " + layer(state.layers) + " has no offset");
    }
    if (filled < 0 || filled > shape[2]) throw std::runtime_error(not_a_state + ": its offset is past its cache");
    auto offsets = cache.at("data_offsets").get<std::vector<size_t>>();
    if (offsets[1] > data.size() - 8 - header_size) throw std::runtime_error(not_a_state + ": it is cut short");
    state.positions = filled, state.kv_heads = shape[3], state.head_dim = shape[4];
    caches.emplace_back(reinterpret_cast<const float*>(tensors + offsets[0]), shape[2]);
    total = shape[3] * shape[4];
  }
  if (state.layers == 0) throw std::runtime_error(not_a_state + ": it has no transformer.layers.0.self_attn/cache");
  for (const auto& [cache, length] : caches) {
    for (int kind = 0; kind < 2; ++kind) {  // keys, values: the first `positions` of each
      const float* start = cache + kind * length * total;
      state.values.insert(state.values.end(), start, start + state.positions * total);
    }
  }
  return state;
}

std::vector<float> read_voice_audio(const std::string& path, int rate, int frame_size, double max_seconds,
                                    bool& truncated) {
  Audio audio = read_wav(path);
  size_t keep = static_cast<size_t>(max_seconds * audio.rate);
  truncated = audio.samples.size() > keep;
  if (truncated) audio.samples.resize(keep);
  std::vector<float> wav = end_on_pause(convert_audio(audio.samples, audio.rate, rate), rate);
  wav.resize((wav.size() + frame_size - 1) / frame_size * frame_size, 0.0f);
  return wav;
}

}  // namespace phaseconv
