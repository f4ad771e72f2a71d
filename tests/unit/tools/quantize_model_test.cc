// quantize_model on a synthetic model: the mix per type, metadata copied with the new file
// type, reconstruction error bounds per type, byte copies when a type does not change, and
// refusals that leave no output file.
#include <gtest/gtest.h>

#include <cmath>

#include "gguf/gguf.h"
#include "model/importers/quantize_model.h"
#include "model/importers/synth_model.h"
#include "quant/quant.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using namespace tools_test;

class QuantizeModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    SynthOptions o;
    o.shape = "tiny";
    o.type = "f16";
    o.output_path = dir_->file("tiny-f16.gguf");
    o.vocab_path = (kFixtures / "vocab-llama2-spm.gguf").string();
    o.threads = 2;
    o.progress = ProgressStyle::kSilent;
    auto summary = write_synthetic_model(o);
    ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string source() { return dir_->file("tiny-f16.gguf"); }

  static Result<QuantizeSummary> quantize(const std::string& out, const std::string& type) {
    QuantizeOptions o;
    o.type = type;
    o.threads = 2;
    o.progress = ProgressStyle::kSilent;
    return quantize_model(source(), out, o);
  }

  static TempDir* dir_;
};

TempDir* QuantizeModelTest::dir_ = nullptr;

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type) return false;
  if (const GgufArray* x = a.as_array()) {
    const GgufArray* y = b.as_array();
    return x->elem_type == y->elem_type && x->ints == y->ints && x->floats == y->floats &&
           x->strings == y->strings;
  }
  if (const std::string* s = a.as_string()) return *s == *b.as_string();
  return a.as_int() == b.as_int() && a.as_float() == b.as_float() && a.as_bool() == b.as_bool();
}

// Relative RMS error of `name` between two files, decoded with the reference dequantizer.
double relative_rms_error(const GgufFile& a, const GgufFile& b, const std::string& name) {
  const GgufTensorInfo* ta = a.find_tensor(name);
  const GgufTensorInfo* tb = b.find_tensor(name);
  EXPECT_TRUE(ta && tb && ta->dims == tb->dims);
  const int64_t cols = static_cast<int64_t>(ta->dims[0]);
  std::vector<float> ra(cols), rb(cols);
  double err = 0.0, ref = 0.0;
  for (uint64_t r = 0; r < ta->n_rows(); ++r) {
    EXPECT_TRUE(dequantize_row(ta->type, a.tensor_data(*ta) + r * row_bytes(ta->type, cols),
                               ra.data(), cols)
                    .is_ok());
    EXPECT_TRUE(dequantize_row(tb->type, b.tensor_data(*tb) + r * row_bytes(tb->type, cols),
                               rb.data(), cols)
                    .is_ok());
    for (int64_t i = 0; i < cols; ++i) {
      err += (ra[i] - rb[i]) * double(ra[i] - rb[i]);
      ref += ra[i] * double(ra[i]);
    }
  }
  return std::sqrt(err / ref);
}

TEST_F(QuantizeModelTest, TypesMetadataAndErrorBounds) {
  struct Case {
    const char* type;
    int64_t file_type;
    TensorType matrix;
    double max_error;  // relative RMS error of a Gaussian matrix
  };
  for (const Case& c :
       {Case{"q8_0", 7, TensorType::Q8_0, 0.01}, Case{"q4_k_m", 15, TensorType::Q4_K, 0.12},
        Case{"q6_k", 18, TensorType::Q6_K, 0.03}}) {
    SCOPED_TRACE(c.type);
    const std::string out = dir_->file(std::string("tiny-") + c.type + ".gguf");
    auto summary = quantize(out, c.type);
    ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
    EXPECT_LT(summary->output_bytes, summary->input_bytes);
    auto in = GgufFile::open(source());
    auto q = GgufFile::open(out);
    ASSERT_TRUE(in.is_ok() && q.is_ok());
    EXPECT_EQ((*q)->get_int("general.file_type"), c.file_type);
    // Every other key is copied unchanged, in order.
    ASSERT_EQ((*q)->metadata().size(), (*in)->metadata().size());
    for (size_t i = 0; i < (*in)->metadata().size(); ++i) {
      const auto& [key, value] = (*in)->metadata()[i];
      EXPECT_EQ((*q)->metadata()[i].first, key);
      if (key != "general.file_type") {
        EXPECT_TRUE(same_value((*q)->metadata()[i].second, value)) << key;
      }
    }
    EXPECT_EQ((*q)->find_tensor("blk.1.ffn_gate.weight")->type, c.matrix);
    EXPECT_EQ((*q)->find_tensor("blk.1.ffn_norm.weight")->type, TensorType::F32);
    // Norms stay F32, unchanged.
    EXPECT_EQ(relative_rms_error(**in, **q, "output_norm.weight"), 0.0);
    for (const char* name : {"blk.1.ffn_gate.weight", "blk.0.attn_q.weight", "output.weight"}) {
      const double error = relative_rms_error(**in, **q, name);
      EXPECT_GT(error, 0.0) << name;
      EXPECT_LT(error, c.max_error) << name;
    }
  }
}

TEST_F(QuantizeModelTest, UnchangedTypesAreCopiedByteForByte) {
  const std::string q8 = dir_->file("copy-q8.gguf");
  ASSERT_TRUE(quantize(q8, "q8_0").is_ok());
  QuantizeOptions o;
  o.type = "q8_0";
  o.threads = 1;
  o.progress = ProgressStyle::kSilent;
  const std::string again = dir_->file("copy-q8-again.gguf");
  auto summary = quantize_model(q8, again, o);
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  EXPECT_EQ(read_bytes(q8), read_bytes(again));
  // Requantizing quantized tensors to another type is allowed and said.
  const std::string q4 = dir_->file("requant-q4_0.gguf");
  o.type = "q4_0";
  auto requant = quantize_model(q8, q4, o);
  ASSERT_TRUE(requant.is_ok()) << requant.status().to_string();
  bool noted = false;
  for (const std::string& note : requant->notes)
    noted |= note.find("already quantized (Q8_0)") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST_F(QuantizeModelTest, RefusalsLeaveNoFile) {
  const std::string out = dir_->file("never.gguf");
  EXPECT_FALSE(quantize(out, "q3_k_s").is_ok());
  QuantizeOptions o;
  o.type = "q8_0";
  o.progress = ProgressStyle::kSilent;
  EXPECT_FALSE(quantize_model(dir_->file("missing.gguf"), out, o).is_ok());
  // A vocabulary-only GGUF is not a model.
  auto vocab = quantize_model((kFixtures / "vocab-llama2-spm.gguf").string(), out, o);
  ASSERT_FALSE(vocab.is_ok());
  EXPECT_NE(vocab.status().message().find("token_embd"), std::string::npos);
  auto same = quantize_model(source(), source(), o);
  ASSERT_FALSE(same.is_ok());
  EXPECT_NE(same.status().message().find("is the input"), std::string::npos);
  EXPECT_FALSE(quantize_model(source(), dir_->file("no-such-dir/out.gguf"), o).is_ok());
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir_->path())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace llamaserve
