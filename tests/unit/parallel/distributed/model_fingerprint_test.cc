// model_fingerprint: a copy of the file gives the same fingerprint; a change to a metadata value
// or to a byte of a tensor's sampled windows gives another.
#include "parallel/distributed/model_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture =
    fs::path(LLAMASERVE_SOURCE_DIR) / "tests/fixtures/reference/tiny-llama-f16.gguf";

std::vector<char> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes `bytes` to a temporary file and returns the fingerprint of the model loaded from it.
uint64_t fingerprint_of(const std::vector<char>& bytes, const std::string& name) {
  const fs::path path = fs::temp_directory_path() / ("llamaserve-fingerprint-" + name + ".gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto model = load_model(path.string());
  EXPECT_TRUE(model.is_ok()) << model.status().to_string();
  const uint64_t fingerprint = model.is_ok() ? model_fingerprint(**model) : 0;
  fs::remove(path);
  return fingerprint;
}

TEST(ModelFingerprintTest, SameFileSameFingerprintAnyChangeAnother) {
  auto model = load_model(kFixture.string());
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const uint64_t original = model_fingerprint(**model);
  const std::vector<char> bytes = read_all(kFixture);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(fingerprint_of(bytes, "copy"), original);

  // general.name "tiny-llama-f16" -> "tiny-llama-f17": a metadata value.
  std::vector<char> renamed = bytes;
  const std::string name = "tiny-llama-f16";
  auto found = std::search(renamed.begin(), renamed.end(), name.begin(), name.end());
  ASSERT_NE(found, renamed.end());
  *(found + static_cast<std::ptrdiff_t>(name.size()) - 1) = '7';
  EXPECT_NE(fingerprint_of(renamed, "renamed"), original);

  // The first, middle and last bytes of a tensor's data.
  const GgufFile& file = *(*model)->file;
  const GgufTensorInfo& tensor = file.tensors().back();
  const size_t begin = file.data_offset() + tensor.offset;
  for (const size_t at : {begin, begin + tensor.n_bytes / 2, begin + tensor.n_bytes - 1}) {
    std::vector<char> changed = bytes;
    changed[at] = static_cast<char>(changed[at] ^ 0x01);
    EXPECT_NE(fingerprint_of(changed, "data"), original) << tensor.name << " byte " << at - begin;
  }
}

}  // namespace
}  // namespace llamaserve
