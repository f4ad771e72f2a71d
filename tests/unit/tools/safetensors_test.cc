// The safetensors reader: well-formed single files and shard sets, and every kind of broken
// header it must refuse with a message instead of reading out of bounds.
#include <gtest/gtest.h>

#include <random>

#include "model/importers/safetensors.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using namespace tools_test;

StTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return {name, "F32", std::move(shape), f32_bytes(random_floats(n, seed))};
}

// The error of opening a file holding `image`.
std::string open_error(const TempDir& dir, const std::vector<uint8_t>& image) {
  const fs::path path = dir.path() / "bad.safetensors";
  write_bytes(path, image.data(), image.size());
  auto file = SafetensorsFile::open(path.string());
  EXPECT_FALSE(file.is_ok());
  return file.is_ok() ? "" : file.status().message();
}

// A header with one tensor entry given as raw JSON, and `data_bytes` bytes of data.
std::vector<uint8_t> raw_image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> image;
  image.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) image.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  image.insert(image.end(), header.begin(), header.end());
  image.resize(image.size() + data_bytes, 0);
  return image;
}

TEST(SafetensorsTest, ReadsTensorsOfEveryFloatType) {
  TempDir dir;
  const StTensor a = f32_tensor("a", {3, 4}, 1);
  const StTensor b{"b.half", "F16", {5}, std::vector<uint8_t>(10, 0x3c)};
  const StTensor c{"c.bf16", "BF16", {2, 1}, {0x80, 0x3f, 0x00, 0x40}};
  write_safetensors(dir.path() / "model.safetensors", {a, b, c});
  auto file = SafetensorsFile::open(dir.file("model.safetensors"));
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  ASSERT_EQ((*file)->tensors().size(), 3u);  // __metadata__ is not a tensor
  const SafetensorsTensor& ta = (*file)->tensors().at("a");
  EXPECT_EQ(ta.dtype, "F32");
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ta.n_elements(), 12u);
  ASSERT_EQ(ta.n_bytes, 48u);
  EXPECT_EQ(std::memcmp(ta.data, a.bytes.data(), 48), 0);
  const SafetensorsTensor& tc = (*file)->tensors().at("c.bf16");
  EXPECT_EQ(tc.n_bytes, 4u);
  EXPECT_EQ(std::memcmp(tc.data, c.bytes.data(), 4), 0);
}

TEST(SafetensorsTest, RefusesMalformedFiles) {
  TempDir dir;
  EXPECT_NE(open_error(dir, {1, 2, 3}).find("too short"), std::string::npos);
  // Header length past the end of the file: a truncated download.
  std::vector<uint8_t> image = safetensors_image({f32_tensor("a", {2, 2}, 1)});
  image.resize(20);
  EXPECT_NE(open_error(dir, image).find("runs past the end"), std::string::npos);
  // Truncated inside the data section.
  image = safetensors_image({f32_tensor("a", {64}, 1)});
  image.resize(image.size() - 4);
  EXPECT_NE(open_error(dir, image).find("outside the"), std::string::npos);
  // Absurd header length.
  image.assign(16, 0xff);
  EXPECT_NE(open_error(dir, image).find("exceeds"), std::string::npos);

  EXPECT_NE(open_error(dir, raw_image("{not json", 0)).find("not a JSON object"),
            std::string::npos);
  EXPECT_NE(open_error(dir, raw_image("[1, 2]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(open_error(dir, raw_image(R"({"a": 5})", 0)).find("not an object"), std::string::npos);
  EXPECT_NE(
      open_error(
          dir,
          raw_image(
              R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})",
              8))
          .find("unknown dtype 'Q4'"),
      std::string::npos);
  EXPECT_NE(
      open_error(dir,
                 raw_image(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8))
          .find("non-negative"),
      std::string::npos);
  EXPECT_NE(
      open_error(dir,
                 raw_image(R"({"a": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}})", 8))
          .find("'shape'"),
      std::string::npos);
  EXPECT_NE(
      open_error(dir, raw_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8))
          .find("data_offsets"),
      std::string::npos);
  // Shape and byte range disagree.
  EXPECT_NE(
      open_error(dir,
                 raw_image(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 12))
          .find("need 12 bytes but data_offsets span 8"),
      std::string::npos);
  // begin > end.
  EXPECT_NE(
      open_error(dir,
                 raw_image(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8))
          .find("outside"),
      std::string::npos);
  // Overlapping tensors.
  EXPECT_NE(
      open_error(
          dir,
          raw_image(
              R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
              12))
          .find("overlap"),
      std::string::npos);
  // Element count overflow.
  EXPECT_FALSE(
      open_error(
          dir,
          raw_image(
              R"({"a": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 8]}})",
              8))
          .empty());
}

// Random byte flips and truncations of a valid file: every result is a clean parse or an
// error (under the sanitizer builds, also no out-of-bounds read).
TEST(SafetensorsTest, CorruptedFilesNeverCrash) {
  TempDir dir;
  const std::vector<uint8_t> image = safetensors_image(
      {f32_tensor("a", {3, 4}, 1), StTensor{"b", "F16", {5}, std::vector<uint8_t>(10, 1)}});
  std::mt19937 rng(1234);
  const fs::path path = dir.path() / "fuzz.safetensors";
  for (int iteration = 0; iteration < 500; ++iteration) {
    std::vector<uint8_t> bytes = image;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    write_bytes(path, bytes.data(), bytes.size());
    auto file = SafetensorsFile::open(path.string());
    if (!file.is_ok()) {
      EXPECT_FALSE(file.status().message().empty());
      continue;
    }
    for (const auto& [name, t] : (*file)->tensors()) {
      EXPECT_EQ(t.n_bytes, t.n_elements() * safetensors_dtype_bytes(t.dtype)) << name;
      uint32_t sum = 0;  // touch every byte handed out: it must lie inside the mapping
      for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
      volatile uint32_t sink = sum;
      (void)sink;
    }
  }
}

TEST(SafetensorsTest, ShardedCheckpointFollowsTheIndex) {
  TempDir dir;
  write_safetensors(dir.path() / "model-00001-of-00002.safetensors",
                    {f32_tensor("x", {2}, 1), f32_tensor("y", {3}, 2)});
  write_safetensors(dir.path() / "model-00002-of-00002.safetensors", {f32_tensor("z", {4}, 3)});
  write_text(dir.path() / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 36}, "weight_map": {
                  "x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
                  "z": "model-00002-of-00002.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::open_dir(dir.path().string());
  ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->n_files(), 2u);
  ASSERT_NE(ckpt->find("z"), nullptr);
  EXPECT_EQ(ckpt->find("z")->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(ckpt->find("missing"), nullptr);
  EXPECT_EQ(ckpt->tensors().size(), 3u);

  // The index names a tensor its shard does not hold.
  write_text(dir.path() / "model.safetensors.index.json",
             R"({"weight_map": {"x": "model-00002-of-00002.safetensors"}})");
  auto wrong = SafetensorsCheckpoint::open_dir(dir.path().string());
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("does not hold it"), std::string::npos);

  // Shard names must stay inside the directory.
  write_text(dir.path() / "model.safetensors.index.json",
             R"({"weight_map": {"x": "../etc/passwd"}})");
  auto escape = SafetensorsCheckpoint::open_dir(dir.path().string());
  ASSERT_FALSE(escape.is_ok());
  EXPECT_NE(escape.status().message().find("plain file name"), std::string::npos);

  // A shard that is missing.
  write_text(dir.path() / "model.safetensors.index.json",
             R"({"weight_map": {"x": "model-00003-of-00003.safetensors"}})");
  EXPECT_FALSE(SafetensorsCheckpoint::open_dir(dir.path().string()).is_ok());

  write_text(dir.path() / "model.safetensors.index.json", R"({"weight_map": []})");
  EXPECT_FALSE(SafetensorsCheckpoint::open_dir(dir.path().string()).is_ok());
}

TEST(SafetensorsTest, DirectoryWithoutWeightsIsAClearError) {
  TempDir dir;
  auto ckpt = SafetensorsCheckpoint::open_dir(dir.path().string());
  ASSERT_FALSE(ckpt.is_ok());
  EXPECT_NE(ckpt.status().message().find("model.safetensors"), std::string::npos);
  // A lone differently named file is accepted.
  write_safetensors(dir.path() / "weights.safetensors", {f32_tensor("w", {2}, 1)});
  auto single = SafetensorsCheckpoint::open_dir(dir.path().string());
  ASSERT_TRUE(single.is_ok()) << single.status().to_string();
  EXPECT_NE(single->find("w"), nullptr);
}

}  // namespace
}  // namespace llamaserve
