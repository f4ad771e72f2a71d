// Helpers of the model-tool tests: a scratch directory, file writing, and a safetensors
// writer that follows the format description (so the reader is tested against the format,
// and bad files are easy to make by patching the result).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llamaserve::tools_test {

namespace fs = std::filesystem;

inline const fs::path kFixtures = LLAMASERVE_FIXTURES_DIR;

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("llamaserve-tools-" + std::to_string(rd()) + "-" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

inline void write_bytes(const fs::path& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_text(const fs::path& path, const std::string& text) {
  write_bytes(path, text.data(), text.size());
}

inline std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct StTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// u64 header length | JSON header | data, tensors packed in the given order.
inline std::vector<uint8_t> safetensors_image(const std::vector<StTensor>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<uint8_t> data;
  for (const StTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  const std::string text = header.dump();
  std::vector<uint8_t> image;
  image.reserve(8 + text.size() + data.size());
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) image.push_back(static_cast<uint8_t>(n >> (8 * i)));
  image.insert(image.end(), text.begin(), text.end());
  image.insert(image.end(), data.begin(), data.end());
  return image;
}

inline void write_safetensors(const fs::path& path, const std::vector<StTensor>& tensors) {
  const std::vector<uint8_t> image = safetensors_image(tensors);
  write_bytes(path, image.data(), image.size());
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 0.5f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return values;
}

}  // namespace llamaserve::tools_test
