// Loading with prefault: the progress callback's byte counts, and that prefaulted weights are
// read without page faults.
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/weights.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kEmbd = 32, kFf = 64, kLayers = 2;
// 10 MiB of F32 embeddings: more than one prefault chunk (8 MiB).
constexpr int64_t kVocab = 81920;

void add(GgufWriter& w, const std::string& name, int64_t rows, int64_t cols) {
  std::vector<uint64_t> dims = {static_cast<uint64_t>(cols)};
  if (rows > 0) dims.push_back(static_cast<uint64_t>(rows));
  const size_t n = static_cast<size_t>(cols * std::max<int64_t>(rows, 1)) * sizeof(float);
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + name.size());
  ASSERT_TRUE(w.add_tensor(name, TensorType::F32, dims, std::move(bytes)).is_ok()) << name;
}

GgufWriter model_writer() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.context_length", 256);
  w.set_u32("llama.embedding_length", kEmbd);
  w.set_u32("llama.block_count", kLayers);
  w.set_u32("llama.feed_forward_length", kFf);
  w.set_u32("llama.attention.head_count", 4);
  w.set_u32("llama.attention.head_count_kv", 4);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  add(w, "token_embd.weight", kVocab, kEmbd);
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(w, b + "attn_norm.weight", 0, kEmbd);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"})
      add(w, b + m + ".weight", kEmbd, kEmbd);
    add(w, b + "ffn_norm.weight", 0, kEmbd);
    add(w, b + "ffn_gate.weight", kFf, kEmbd);
    add(w, b + "ffn_up.weight", kFf, kEmbd);
    add(w, b + "ffn_down.weight", kEmbd, kFf);
  }
  add(w, "output_norm.weight", 0, kEmbd);
  return w;
}

class PrefaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(
        (fs::temp_directory_path() / ("weights_test_" + std::to_string(getpid()) + ".gguf"))
            .string());
    ASSERT_TRUE(model_writer().write(*path_).is_ok());
  }
  static void TearDownTestSuite() {
    fs::remove(*path_);
    delete path_;
  }
  static const std::string& path() { return *path_; }

 private:
  static std::string* path_;
};
std::string* PrefaultTest::path_ = nullptr;

struct Report {
  uint64_t done_bytes;
  uint64_t total_bytes;
  std::string tensor;
};

uint64_t tensor_bytes(const GgufFile& file) {
  uint64_t total = 0;
  for (const GgufTensorInfo& t : file.tensors()) total += t.n_bytes;
  return total;
}

TEST_F(PrefaultTest, ProgressCountsUpToTheTensorBytesInFileOrder) {
  std::vector<Report> reports;
  LoadOptions options;
  options.prefault = true;
  options.on_progress = [&](uint64_t done, uint64_t total, std::string_view tensor) {
    reports.push_back({done, total, std::string(tensor)});
  };
  auto model = load_model(path(), options);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  const GgufFile& file = *(*model)->file;
  const uint64_t total = tensor_bytes(file);
  EXPECT_GT(total, 10u << 20);

  ASSERT_FALSE(reports.empty());
  // The embedding table takes two chunks; every other tensor one.
  EXPECT_EQ(reports.size(), file.tensors().size() + 1);
  uint64_t previous = 0;
  uint64_t previous_offset = 0;
  std::set<std::string> seen;
  for (const Report& r : reports) {
    EXPECT_GT(r.done_bytes, previous);
    EXPECT_EQ(r.total_bytes, total);
    previous = r.done_bytes;
    const GgufTensorInfo* info = file.find_tensor(r.tensor);
    ASSERT_NE(info, nullptr) << r.tensor;
    EXPECT_GE(info->offset, previous_offset) << r.tensor << " reported out of file order";
    previous_offset = info->offset;
    seen.insert(r.tensor);
  }
  EXPECT_EQ(reports.back().done_bytes, total);
  EXPECT_EQ(seen.size(), file.tensors().size());
  EXPECT_EQ(reports.front().tensor, "token_embd.weight");
  EXPECT_EQ(reports.front().done_bytes, 8u << 20);
}

TEST_F(PrefaultTest, WithoutPrefaultNothingIsReported) {
  int calls = 0;
  LoadOptions options;
  options.on_progress = [&](uint64_t, uint64_t, std::string_view) { ++calls; };
  auto model = load_model(path(), options);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_EQ(calls, 0);
  auto plain = load_model(path());  // the default: no options at all
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->weight_bytes(), (*model)->weight_bytes());
}

// Page faults this thread takes while reading one byte of every page of every tensor.
long faults_reading_tensors(const GgufFile& file, uint64_t* checksum) {
  const long page = sysconf(_SC_PAGESIZE);
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  for (const GgufTensorInfo& t : file.tensors()) {
    const auto* data = static_cast<const volatile uint8_t*>(file.tensor_data(t));
    for (uint64_t i = 0; i < t.n_bytes; i += static_cast<uint64_t>(page)) *checksum += data[i];
  }
  getrusage(RUSAGE_THREAD, &after);
  return (after.ru_minflt - before.ru_minflt) + (after.ru_majflt - before.ru_majflt);
}

TEST_F(PrefaultTest, PrefaultedWeightsAreReadWithoutPageFaults) {
  uint64_t lazy_sum = 0, prefaulted_sum = 0;
  long lazy_faults = 0;
  {
    auto lazy = load_model(path());
    ASSERT_TRUE(lazy.is_ok());
    lazy_faults = faults_reading_tensors(*(*lazy)->file, &lazy_sum);
  }
  LoadOptions options;
  options.prefault = true;
  auto model = load_model(path(), options);
  ASSERT_TRUE(model.is_ok());
  const long prefaulted_faults = faults_reading_tensors(*(*model)->file, &prefaulted_sum);
  // The control shows that the count sees faults at all: one fault maps several pages (16, or a
  // whole large folio of up to 2 MiB), but 10 MiB still take a few.
  EXPECT_GE(lazy_faults, 2);
  EXPECT_EQ(prefaulted_faults, 0);
  EXPECT_EQ(prefaulted_sum, lazy_sum);
}

TEST_F(PrefaultTest, PrefaultOfALoadedModelAndOfMemoryImages) {
  auto model = load_model(path());
  ASSERT_TRUE(model.is_ok());
  uint64_t last = 0, total = 0;
  ASSERT_TRUE(prefault_weights(**model, [&](uint64_t done, uint64_t all, std::string_view) {
                last = done;
                total = all;
              }).is_ok());
  EXPECT_EQ(total, tensor_bytes(*(*model)->file));
  EXPECT_EQ(last, total);

  // A file image in (unaligned) heap memory: pages are shared with other objects, so only the
  // tensors' own bytes may be read (ASan builds check this).
  auto image = model_writer().to_bytes();
  ASSERT_TRUE(image.is_ok());
  std::vector<uint8_t> shifted(image->size() + 3);
  std::copy(image->begin(), image->end(), shifted.begin() + 3);
  auto file = GgufFile::parse(shifted.data() + 3, image->size());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  uint64_t image_last = 0;
  ASSERT_TRUE(prefault_tensor_data(**file, [&](uint64_t done, uint64_t, std::string_view) {
                image_last = done;
              }).is_ok());
  EXPECT_EQ(image_last, total);
}

}  // namespace
}  // namespace llamaserve
