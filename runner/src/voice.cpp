#include "voice.h"

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "audio.h"

namespace phaseconv {
namespace {

// A tensor of a .safetensors file, its bytes checked against the file: its data lies inside it and
// holds exactly what its dtype and shape say.
struct Stored {
  std::string dtype;
  std::vector<int64_t> shape;
  const char* data = nullptr;
  size_t size = 0;
};

// `any_dtype`: a tensor read for its shape alone (its bytes still inside the file).
Stored stored(const nlohmann::json& entry, const std::string& body, const std::string& not_a_state,
              bool any_dtype = false) {
  if (!entry.is_object()) throw std::runtime_error(not_a_state);
  Stored tensor;
  tensor.dtype = entry.at("dtype").get<std::string>();
  tensor.shape = entry.at("shape").get<std::vector<int64_t>>();
  auto offsets = entry.at("data_offsets").get<std::vector<uint64_t>>();
  if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > body.size()) {
    throw std::runtime_error(not_a_state + ": a tensor's data lies outside the file");
  }
  uint64_t count = 1;
  for (int64_t size : tensor.shape) {
    if (size < 0 || (size > 0 && count > std::numeric_limits<uint32_t>::max() / static_cast<uint64_t>(size))) {
      throw std::runtime_error(not_a_state + ": a tensor's shape is not a size");
    }
    count *= static_cast<uint64_t>(size);
  }
  const uint64_t width = tensor.dtype == "F32" || tensor.dtype == "I32" ? 4 : tensor.dtype == "I64" ? 8 : 0;
  if (!any_dtype && (width == 0 || count * width != offsets[1] - offsets[0])) {
    throw std::runtime_error(not_a_state + ": a tensor holds another number of bytes than its shape says");
  }
  tensor.data = body.data() + offsets[0], tensor.size = offsets[1] - offsets[0];
  return tensor;
}

int64_t filled_positions(const nlohmann::json& header, const std::string& layer, const std::string& body,
                         const std::string& not_a_state) {
  if (header.contains(layer + "offset")) {
    Stored offset = stored(header[layer + "offset"], body, not_a_state);
    if (offset.size == 8 && offset.dtype == "I64") {
      int64_t value;
      std::memcpy(&value, offset.data, 8);
      return value;
    }
    if (offset.size == 4 && offset.dtype == "I32") {
      int32_t value;
      std::memcpy(&value, offset.data, 4);
      return value;
    }
    throw std::runtime_error(not_a_state + ": " + layer + "offset is not one integer");
  }
  if (header.contains(layer + "current_end")) {  // older files: its length
    Stored end = stored(header[layer + "current_end"], body, not_a_state, true);
    if (end.shape.size() != 1) throw std::runtime_error(not_a_state + ": " + layer + "current_end is not a list");
    return end.shape[0];
  }
  throw std::runtime_error(not_a_state + ": " + layer + " has no offset");
}

}  // namespace

VoiceState read_voice_state(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("no such voice file: " + path);
  return voice_state_of(std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()), path);
}

VoiceState voice_state_of(const std::string& data, const std::string& path) {
  const std::string not_a_state = path + " is not a pocket-tts voice state";
  uint64_t header_size = 0;
  if (data.size() < 8) throw std::runtime_error(not_a_state);
  std::memcpy(&header_size, data.data(), 8);
  if (header_size > data.size() - 8) throw std::runtime_error(not_a_state);
  const std::string body = data.substr(8 + header_size);
  auto layer = [](int64_t n) { return "transformer.layers." + std::to_string(n) + ".self_attn/"; };
  VoiceState state;
  try {
    nlohmann::json header = nlohmann::json::parse(data.substr(8, header_size));
    if (!header.is_object()) throw std::runtime_error(not_a_state);
    std::vector<std::pair<Stored, int64_t>> caches;  // each layer's cache and its filled positions
    for (; header.contains(layer(state.layers) + "cache"); ++state.layers) {
      Stored cache = stored(header[layer(state.layers) + "cache"], body, not_a_state);
      const auto& shape = cache.shape;
      if (cache.dtype != "F32" || shape.size() != 5 || shape[0] != 2 || shape[1] != 1 || shape[3] < 1 ||
          shape[4] < 1) {
        throw std::runtime_error(not_a_state + ": its cache is not float32 [2, 1, T, H, D]");
      }
      if (state.layers > 0 && (shape[3] != state.kv_heads || shape[4] != state.head_dim)) {
        throw std::runtime_error(not_a_state + ": its layers' caches differ in shape");
      }
      int64_t filled = filled_positions(header, layer(state.layers), body, not_a_state);
      if (filled < 0 || filled > shape[2]) throw std::runtime_error(not_a_state + ": its offset is past its cache");
      if (state.layers > 0 && filled != state.positions) {
        throw std::runtime_error(not_a_state + ": its layers hold different numbers of positions");
      }
      state.positions = filled, state.kv_heads = shape[3], state.head_dim = shape[4];
      caches.emplace_back(cache, shape[2]);
    }
    if (state.layers == 0) throw std::runtime_error(not_a_state + ": it has no transformer.layers.0.self_attn/cache");
    const size_t row = static_cast<size_t>(state.kv_heads * state.head_dim);
    state.values.reserve(caches.size() * 2 * state.positions * row);
    for (const auto& [cache, length] : caches) {
      for (int kind = 0; kind < 2; ++kind) {  // keys, values: the first `positions` of each
        const char* start = cache.data + (kind * length * row) * sizeof(float);
        size_t at = state.values.size(), count = state.positions * row;
        if (count == 0) continue;  // memcpy's pointers must not be null, even for no bytes
        state.values.resize(at + count);
        std::memcpy(state.values.data() + at, start, count * sizeof(float));  // the file's bytes need no alignment
      }
    }
  } catch (const nlohmann::json::exception&) {
    throw std::runtime_error(not_a_state);
  }
  return state;
}

std::vector<float> read_voice_audio(const std::string& path, int rate, int frame_size, double max_seconds,
                                    bool& truncated) {
  return voice_audio(read_wav(path), rate, frame_size, max_seconds, truncated);
}

std::vector<float> voice_audio(Audio audio, int rate, int frame_size, double max_seconds, bool& truncated) {
  size_t keep = static_cast<size_t>(max_seconds * audio.rate);
  truncated = audio.samples.size() > keep;
  if (truncated) audio.samples.resize(keep);
  std::vector<float> wav = end_on_pause(convert_audio(audio.samples, audio.rate, rate), rate);
  wav.resize((wav.size() + frame_size - 1) / frame_size * frame_size, 0.0f);
  return wav;
}

}  // namespace phaseconv
