// Reading real files: the vocab-only fixtures, the default model (when present), and
// the round-trip fixture that tests/py/test_gguf_interop.py hands to the PyPI gguf package.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "gguf/gguf.h"
#include "gguf_test_util.h"

namespace llamaserve {
namespace {

using namespace gguf_test;
namespace fs = std::filesystem;

const std::string kFixtures = LLAMASERVE_FIXTURES_DIR;
const std::string kModel =
    std::string(LLAMASERVE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::unique_ptr<GgufFile> open_ok(const std::string& path) {
  auto file = GgufFile::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  return file.is_ok() ? std::move(file).value() : nullptr;
}

TEST(GgufFiles, Llama2SentencePieceVocab) {
  auto file = open_ok(kFixtures + "/vocab-llama2-spm.gguf");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->metadata().size(), 22u);
  EXPECT_TRUE(file->tensors().empty());
  EXPECT_EQ(file->get_string("general.architecture"), "llama");
  EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(file->get_int("llama.block_count"), 32);
  EXPECT_EQ(file->get_int("llama.context_length"), 4096);
  EXPECT_EQ(file->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(file->get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(file->get_bool("tokenizer.ggml.add_eos_token"), false);
  EXPECT_FLOAT_EQ(static_cast<float>(*file->get_float("llama.attention.layer_norm_rms_epsilon")),
                  1e-5f);
  const GgufArray* tokens = file->get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 32000u);
  EXPECT_EQ(tokens->strings[0], "<unk>");
  EXPECT_EQ(tokens->strings[1], "<s>");
  EXPECT_EQ(tokens->strings[2], "</s>");
  const GgufArray* scores = file->get_array("tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->elem_type, GgufValueType::FLOAT32);
  EXPECT_EQ(scores->size(), 32000u);
  const GgufArray* types = file->get_array("tokenizer.ggml.token_type");
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(types->elem_type, GgufValueType::INT32);
  EXPECT_EQ(std::vector<int64_t>(types->ints.begin(), types->ints.begin() + 3),
            (std::vector<int64_t>{2, 3, 3}));
  EXPECT_TRUE(require_keys(*file, {"tokenizer.ggml.tokens", "tokenizer.ggml.scores"}).is_ok());
}

TEST(GgufFiles, Llama3BpeVocab) {
  auto file = open_ok(kFixtures + "/vocab-llama3-bpe.gguf");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(file->get_string("tokenizer.ggml.pre"), "llama-bpe");
  EXPECT_EQ(file->get_float("llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"), 8);
  EXPECT_EQ(file->get_int("tokenizer.ggml.eos_token_id"), 128001);
  const GgufArray* tokens = file->get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->size(), 128256u);
  EXPECT_EQ(tokens->strings[0], "!");
  const GgufArray* merges = file->get_array("tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  ASSERT_EQ(merges->size(), 280147u);
  EXPECT_EQ(merges->strings[0], "\xC4\xA0 \xC4\xA0");  // "Ġ Ġ"
}

TEST(GgufFiles, SmolLM2Model) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "model file absent: " << kModel;
  auto file = open_ok(kModel);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->get_int("llama.block_count"), 30);
  EXPECT_EQ(file->get_int("llama.embedding_length"), 576);
  EXPECT_EQ(file->get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(file->get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(file->get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(file->get_string("tokenizer.ggml.pre"), "smollm");
  const std::string templ = file->get_string("tokenizer.chat_template").value_or("");
  EXPECT_EQ(templ.rfind("{% for message in messages %}", 0), 0u) << templ.substr(0, 40);
  ASSERT_EQ(file->tensors().size(), 272u);

  const GgufTensorInfo* embd = file->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, TensorType::Q8_0);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(embd->n_bytes, 576u / 32 * 34 * 49152);
  EXPECT_EQ(file->data_offset() + embd->offset, 1785664u);  // as gguf-py reports it
  EXPECT_EQ(file->find_tensor("output.weight"), nullptr) << "embeddings are tied";
  const GgufTensorInfo* norm = file->find_tensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, TensorType::F32);
  EXPECT_EQ(norm->dims, (std::vector<uint64_t>{576}));
  const GgufTensorInfo* down = file->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->type, TensorType::Q4_1);
  EXPECT_EQ(down->dims, (std::vector<uint64_t>{1536, 576}));

  // RMSNorm weights are ordinary finite floats; reading them checks the data pointer.
  const float* gamma = reinterpret_cast<const float*>(file->tensor_data(*norm));
  for (size_t i = 0; i < 576; ++i) ASSERT_TRUE(std::isfinite(gamma[i])) << i;
  EXPECT_TRUE(
      require_tensors(*file, {"token_embd.weight", "output_norm.weight", "blk.29.ffn_up.weight"})
          .is_ok());
}

// Writes the sample file (alignment 64) and reads it back. With LLAMASERVE_WRITE_FIXTURES set,
// it goes to tests/fixtures/generated/gguf_roundtrip.gguf, where the Python interop test
// reads it with the PyPI gguf package.
TEST(GgufInterop, WritesRoundTripFixture) {
  fs::path path;
  if (std::getenv("LLAMASERVE_WRITE_FIXTURES") != nullptr) {
    fs::path dir = fs::path(LLAMASERVE_SOURCE_DIR) / "tests/fixtures/generated";
    fs::create_directories(dir);
    path = dir / "gguf_roundtrip.gguf";
  } else {
    path = fs::path(::testing::TempDir()) / "gguf_roundtrip.gguf";
  }
  GgufWriter writer(64);
  add_sample_metadata(writer);
  add_sample_tensors(writer);
  Status status = writer.write(path.string());
  ASSERT_TRUE(status.is_ok()) << status.to_string();

  auto file = open_ok(path.string());
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->metadata().size(), 30u);
  ASSERT_EQ(file->tensors().size(), sample_tensors().size());
  for (size_t i = 0; i < sample_tensors().size(); ++i) {
    const GgufTensorInfo& info = file->tensors()[i];
    const uint8_t* data = file->tensor_data(info);
    EXPECT_EQ(std::vector<uint8_t>(data, data + info.n_bytes),
              pattern_bytes(info.n_bytes, sample_seed(i)));
  }
}

}  // namespace
}  // namespace llamaserve
