// Synthetic models in memory: the model loaded from the memory file is the one `synth` writes
// to disk with the same seed, tensor for tensor and byte for byte; specs and memory checks.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>

#include "gguf/gguf.h"
#include "model/importers/synth_memory.h"
#include "model/importers/synth_model.h"
#include "model/shapes.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using namespace tools_test;

SynthOptions tiny_options(const std::string& type) {
  SynthOptions o;
  o.shape = "tiny";
  o.type = type;
  o.vocab_path = (kFixtures / "vocab-llama2-spm.gguf").string();
  o.seed = 42;
  o.threads = 2;
  o.progress = ProgressStyle::kSilent;
  return o;
}

// Open descriptors of this process, to check that the memory file is not leaked.
int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

void expect_same_model(const LoadedModel& memory, const GgufFile& file) {
  const GgufFile& mem = *memory.file;
  EXPECT_EQ(mem.file_size(), file.file_size());
  EXPECT_EQ(mem.data_offset(), file.data_offset());
  ASSERT_EQ(mem.metadata().size(), file.metadata().size());
  for (size_t i = 0; i < file.metadata().size(); ++i) {
    EXPECT_EQ(mem.metadata()[i].first, file.metadata()[i].first);
  }
  EXPECT_EQ(mem.get_string("general.name"), file.get_string("general.name"));
  ASSERT_EQ(mem.tensors().size(), file.tensors().size());
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const GgufTensorInfo& a = mem.tensors()[i];
    const GgufTensorInfo& b = file.tensors()[i];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.type, b.type) << a.name;
    ASSERT_EQ(a.dims, b.dims) << a.name;
    ASSERT_EQ(a.n_bytes, b.n_bytes) << a.name;
    ASSERT_EQ(std::memcmp(mem.tensor_data(a), file.tensor_data(b), a.n_bytes), 0) << a.name;
  }
}

TEST(SynthMemoryTest, TinyInMemoryIsTheFileSynthWrites) {
  for (const char* type : {"f16", "q8_0"}) {
    SCOPED_TRACE(type);
    const int fds_before = open_fds();
    auto in_memory = synthesize_in_memory(tiny_options(type));
    ASSERT_TRUE(in_memory.is_ok()) << in_memory.status().to_string();
    EXPECT_EQ(open_fds(), fds_before);  // the mapping alone keeps the memory file
    EXPECT_EQ(in_memory->threads, 2);
    EXPECT_GT(in_memory->synth_seconds, 0.0);

    // The shape's config.
    const ModelConfig& c = in_memory->model->config;
    const ModelConfig expected = config_from_shape(**find_model_shape("tiny"));
    EXPECT_EQ(c.n_vocab, expected.n_vocab);
    EXPECT_EQ(c.n_embd, expected.n_embd);
    EXPECT_EQ(c.n_layer, expected.n_layer);
    EXPECT_EQ(c.n_head, expected.n_head);
    EXPECT_EQ(c.n_head_kv, expected.n_head_kv);
    EXPECT_EQ(c.n_ff, expected.n_ff);
    EXPECT_EQ(c.n_ctx_train, expected.n_ctx_train);
    EXPECT_FLOAT_EQ(c.rope_theta, expected.rope_theta);
    EXPECT_EQ(in_memory->model->weights.layers.size(), 4u);

    // The same bytes as the file of the same seed, and the size predicted before writing.
    TempDir dir;
    SynthOptions to_file = tiny_options(type);
    to_file.output_path = dir.file("tiny.gguf");
    auto summary = write_synthetic_model(to_file);
    ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
    auto file = GgufFile::open(to_file.output_path);
    ASSERT_TRUE(file.is_ok());
    expect_same_model(*in_memory->model, **file);
    EXPECT_EQ(in_memory->summary.n_bytes, summary->n_bytes);
    EXPECT_EQ(*synthetic_tensor_bytes(to_file), summary->n_bytes);

    // Another seed gives other weights.
    SynthOptions other_seed = tiny_options(type);
    other_seed.seed = 43;
    auto other = synthesize_in_memory(other_seed);
    ASSERT_TRUE(other.is_ok());
    const QTensor& a = in_memory->model->weights.layers[0].wq;
    const QTensor& b = other->model->weights.layers[0].wq;
    EXPECT_NE(std::memcmp(a.data, b.data, a.n_bytes), 0);
  }
}

TEST(SynthMemoryTest, PrefaultsWithProgressLikeAFile) {
  uint64_t last_done = 0, last_total = 0;
  LoadOptions load;
  load.prefault = true;
  load.on_progress = [&](uint64_t done, uint64_t total, std::string_view) {
    last_done = done;
    last_total = total;
  };
  auto model = synthesize_in_memory(tiny_options("q4_0"), load);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EXPECT_GT(last_total, 0u);
  EXPECT_EQ(last_done, last_total);
}

TEST(SynthMemoryTest, SpecsAndErrors) {
  auto spec = parse_synth_spec("llama2-70b:f16");
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->shape, "llama2-70b");
  EXPECT_EQ(spec->type, "f16");
  spec = parse_synth_spec("llama3-8b:q4_k_m");
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->type, "q4_k_m");
  spec = parse_synth_spec("tiny");
  ASSERT_TRUE(spec.is_ok());
  EXPECT_EQ(spec->type, "f16");
  for (const char* bad : {"llama2-8b:f16", "tiny:q3_k", "", ":f16", "tiny:"}) {
    auto error = parse_synth_spec(bad);
    ASSERT_FALSE(error.is_ok()) << bad;
    EXPECT_NE(error.status().message().find("SHAPE:TYPE"), std::string::npos) << bad;
  }

  // 70B in F16: 80 layers of 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 F16 values,
  // two 32000 x 8192 F16 tables, F32 norms.
  SynthOptions big;
  big.shape = "llama2-70b";
  big.type = "f16";
  const uint64_t expected =
      2ull * (80ull * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3ull * 8192 * 28672) +
              2ull * 32000 * 8192) +
      4ull * (2 * 80 + 1) * 8192;
  EXPECT_EQ(*synthetic_tensor_bytes(big), expected);

  EXPECT_TRUE(check_memory_for("x", 100, 100).is_ok());
  EXPECT_TRUE(check_memory_for("x", 100, std::nullopt).is_ok());
  const Status short_of_memory =
      check_memory_for("synthesizing llama2-70b f16", expected, uint64_t{64} << 30);
  ASSERT_FALSE(short_of_memory.is_ok());
  EXPECT_NE(short_of_memory.message().find("128.48 GiB"), std::string::npos)
      << short_of_memory.message();
  EXPECT_NE(short_of_memory.message().find("64.00 GiB is available"), std::string::npos);
  ASSERT_TRUE(available_memory_bytes().has_value());  // Linux has /proc/meminfo
  EXPECT_GT(*available_memory_bytes(), 0u);

  // Bad options fail before a memory file is made, and leave no descriptor behind.
  const int fds_before = open_fds();
  SynthOptions bad_vocab = tiny_options("f16");
  bad_vocab.vocab_path = (kFixtures / "vocab-llama3-bpe.gguf").string();  // 128256 tokens
  auto mismatch = synthesize_in_memory(bad_vocab);
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_NE(mismatch.status().message().find("128256 tokens"), std::string::npos);
  SynthOptions bad_shape = tiny_options("f16");
  bad_shape.shape = "gpt-5";
  EXPECT_FALSE(synthesize_in_memory(bad_shape).is_ok());
  EXPECT_EQ(open_fds(), fds_before);
}

}  // namespace
}  // namespace llamaserve
