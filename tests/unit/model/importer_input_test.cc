// Regressions from fuzzing the checkpoint readers (tests/fuzz/*_fuzz.cc), and their in-memory
// entry points: deeply nested JSON used to overflow the stack when an error message dumped
// it or a value was copied; numbers beyond the float range became inf and passed "> 0" checks.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/importers/hf_config.h"
#include "model/importers/hf_tokenizer.h"
#include "model/importers/json_input.h"
#include "model/importers/safetensors.h"

namespace llamaserve {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(LLAMASERVE_SOURCE_DIR) / "tests" / "fuzz" / "corpus";

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Far deeper than the stack takes when a value is dumped or copied level by level.
constexpr size_t kDeep = 200000;

std::string config_json(const std::string& extra) {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100)" +
         extra + "}";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void expect_error(const Status& status, const std::string& fragment) {
  EXPECT_FALSE(status.is_ok());
  EXPECT_NE(status.message().find(fragment), std::string::npos) << status.to_string();
}

TEST(JsonNesting, CountsOnlyBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("{}"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": [[]]}]})"), 5u);
  EXPECT_EQ(json_nesting_depth(R"({"[[[[": "]]{{"})"), 1u);
  EXPECT_EQ(json_nesting_depth(R"(["a \"[[[ b", "\\", [[]]])"), 3u);
  EXPECT_EQ(json_nesting_depth("42"), 0u);
  EXPECT_TRUE(check_json_nesting(nested(kMaxJsonNesting), "x.json").is_ok());
  expect_error(check_json_nesting(nested(kMaxJsonNesting + 1), "x.json"),
               "x.json nests arrays and objects 65 levels deep; at most 64 are accepted");
}

TEST(ImporterRegression, DeeplyNestedConfigJsonIsAnError) {
  // Used to crash: the "should be an integer" message dumped the value recursively.
  expect_error(parse_hf_config(config_json(R"(, "head_dim": )" + nested(kDeep))).status(),
               "config.json nests arrays and objects 200001 levels deep");
  ASSERT_TRUE(parse_hf_config(config_json("")).is_ok());
}

TEST(ImporterRegression, DeeplyNestedTokenizerFilesAreErrors) {
  // Used to crash: the pre_tokenizer section was copied recursively.
  const std::string tokenizer =
      R"({"model": {"vocab": {"a": 0}, "merges": []}, "pre_tokenizer": )" + nested(kDeep) + "}";
  expect_error(tokenizer_from_hf_json(tokenizer).status(), "tokenizer.json nests");
  TokenizerData data;
  expect_error(apply_tokenizer_config(R"({"chat_template": )" + nested(kDeep) + "}", data),
               "tokenizer_config.json nests");
  HfTokenizerFiles files;
  files.tokenizer_json = tokenizer;
  expect_error(hf_tokenizer_from_files(files, {8, std::nullopt, std::nullopt}).status(),
               "tokenizer.json nests");
}

TEST(ImporterRegression, DeeplyNestedSafetensorsHeaderAndIndexAreErrors) {
  const std::string header = R"({"__metadata__": {"x": )" + nested(kDeep) + "}}";
  std::vector<uint8_t> image(8);
  for (int i = 0; i < 8; ++i) image[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  image.insert(image.end(), header.begin(), header.end());
  expect_error(SafetensorsFile::parse(image.data(), image.size(), "deep.safetensors").status(),
               "safetensors file 'deep.safetensors': the header nests");
  expect_error(
      parse_safetensors_index(R"({"weight_map": {}, "metadata": )" + nested(kDeep) + "}").status(),
      "the index nests");
}

TEST(ImporterRegression, NumbersBeyondTheFloatRangeAreErrors) {
  // Used to be accepted with an infinite factor: 1e300 > 0 as a double, inf as a float.
  expect_error(
      parse_hf_config(config_json(R"(, "rope_scaling": {"type": "linear", "factor": 1e300})"))
          .status(),
      "'factor' = 1e+300 is outside the range of a 32-bit float");
  // Used to pass validate_config's high_freq_factor > low_freq_factor as inf > 1.
  expect_error(parse_hf_config(config_json(R"(, "rope_scaling": {"rope_type": "llama3",
                   "factor": 8.0, "high_freq_factor": 1e300})"))
                   .status(),
               "'high_freq_factor'");
  expect_error(parse_hf_config(config_json(R"(, "rope_theta": -1e39)")).status(), "'rope_theta'");
  auto fits = parse_hf_config(config_json(R"(, "rope_theta": 3.4e38, "rms_norm_eps": 1e-5)"));
  ASSERT_TRUE(fits.is_ok()) << fits.status().to_string();
  EXPECT_FLOAT_EQ(fits->config.rope_theta, 3.4e38f);
}

TEST(ImporterRegression, MergePairsWithEmptyOrSpacedPiecesAreErrors) {
  auto tokenizer = [](const std::string& merges) {
    return tokenizer_from_hf_json(
        R"({"model": {"vocab": {"a": 0, "b": 1, "ab": 2, "a b": 3}, "merges": )" + merges +
        R"(}, "pre_tokenizer": {"type": "ByteLevel"}})");
  };
  auto pairs = tokenizer(R"([["a", "b"], "a b"])");
  ASSERT_TRUE(pairs.is_ok()) << pairs.status().to_string();
  EXPECT_EQ(pairs->merges, (std::vector<std::string>{"a b", "a b"}));
  // Used to be accepted as " b" and "a b b", which the engine then refused to load (or split
  // in the wrong place).
  expect_error(tokenizer(R"([["", "b"]])").status(), R"(merge ["","b"] is not two non-empty)");
  expect_error(tokenizer(R"([["a b", "b"]])").status(), "without spaces");
  expect_error(tokenizer(R"([["a", ""]])").status(), "without spaces");
  expect_error(tokenizer(R"(["a  b"])").status(), "without spaces");
}

TEST(ImporterInMemory, SafetensorsImageAndFileAgree) {
  const fs::path path = kCorpus / "safetensors" / "mixed-dtypes.safetensors";
  auto file = SafetensorsFile::open(path.string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  const std::string bytes = read_file(path);
  auto image =
      SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "image");
  ASSERT_TRUE(image.is_ok()) << image.status().to_string();
  ASSERT_EQ((*image)->tensors().size(), (*file)->tensors().size());
  ASSERT_EQ((*file)->tensors().size(), 7u);
  for (const auto& [name, t] : (*file)->tensors()) {
    const SafetensorsTensor& u = (*image)->tensors().at(name);
    EXPECT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(u.shape, t.shape) << name;
    ASSERT_EQ(u.n_bytes, t.n_bytes) << name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(u.data), u.n_bytes),
              std::string(reinterpret_cast<const char*>(t.data), t.n_bytes))
        << name;
  }
  const SafetensorsTensor& embd = (*image)->tensors().at("model.embed_tokens.weight");
  EXPECT_EQ(embd.dtype, "F16");
  EXPECT_EQ(embd.shape, (std::vector<int64_t>{4, 2}));
}

TEST(ImporterInMemory, SafetensorsIndex) {
  auto index =
      parse_safetensors_index(read_file(kCorpus / "safetensors" / "model.safetensors.index.json"));
  ASSERT_TRUE(index.is_ok()) << index.status().to_string();
  EXPECT_EQ(index->shards, (std::vector<std::string>{"model-00002-of-00002.safetensors",
                                                     "model-00001-of-00002.safetensors"}));
  EXPECT_EQ(index->weight_map.at("model.embed_tokens.weight"), "model-00001-of-00002.safetensors");
  expect_error(parse_safetensors_index(R"({"weight_map": {"a": "../x.safetensors"}})").status(),
               "shard name '../x.safetensors' is not a plain file name");
  expect_error(parse_safetensors_index(R"({"weight_map": {}})").status(), "lists 0 shards");
  expect_error(parse_safetensors_index("[]").status(), "\"weight_map\"");
}

TEST(ImporterInMemory, TokenizerFromFilesMatchesTheDirectoryReader) {
  const fs::path dir =
      fs::temp_directory_path() / ("importer_input_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string spm = read_file(kCorpus / "sentencepiece" / "bpe-bytes.model");
  const std::string config = R"({"bos_token": "<s>", "chat_template": "{{ messages }}"})";
  std::ofstream(dir / "tokenizer.model", std::ios::binary) << spm;
  std::ofstream(dir / "tokenizer_config.json") << config;

  HfTokenizerFiles files;
  files.tokenizer_model = spm;
  files.tokenizer_config_json = config;
  const HfTokenizerDefaults defaults{400, std::nullopt, std::nullopt};
  auto from_files = hf_tokenizer_from_files(files, defaults);
  auto from_dir = read_hf_tokenizer(dir.string(), defaults);
  fs::remove_all(dir);
  ASSERT_TRUE(from_files.is_ok()) << from_files.status().to_string();
  ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().to_string();
  EXPECT_EQ(from_files->tokens, from_dir->tokens);
  EXPECT_EQ(from_files->tokens.size(), 400u);
  EXPECT_EQ(from_files->tokens[4], "<|im_start|>");  // a user-defined piece after <pad>
  EXPECT_EQ(from_files->bos_id, 1);
  EXPECT_EQ(from_files->chat_template, "{{ messages }}");
  EXPECT_EQ(from_files->chat_template, from_dir->chat_template);

  expect_error(hf_tokenizer_from_files({}, defaults).status(),
               "neither tokenizer.model (SentencePiece) nor tokenizer.json");
}

}  // namespace
}  // namespace llamaserve
