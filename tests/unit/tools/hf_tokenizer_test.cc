// tokenizer.json and tokenizer_config.json reading: merges in both serializations, added
// tokens, pre-tokenizer recognition, special tokens, chat templates, vocabulary padding, and
// malformed JSON that must give errors rather than exceptions.
#include <gtest/gtest.h>

#include <random>

#include "model/importers/hf_config.h"
#include "model/importers/hf_tokenizer.h"
#include "tools_test_util.h"

namespace llamaserve {
namespace {

using json = nlohmann::json;
using namespace tools_test;

const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json toy_tokenizer(json merges, json pre_tokenizer) {
  return {{"version", "1.0"},
          {"added_tokens", json::array({{{"id", 5}, {"content", "<|begin|>"}, {"special", true}},
                                        {{"id", 6}, {"content", "<tool>"}, {"special", false}}})},
          {"pre_tokenizer", std::move(pre_tokenizer)},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<|begin|>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})}}},
          {"model",
           {{"type", "BPE"},
            {"vocab",
             {{"a", 0},
              {"b", 1},
              {"ab", 2},
              {"\xC4\xA0", 3},
              {"\xC4\xA0"
               "ab",
               4}}},
            {"merges", std::move(merges)}}}};
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}

TEST(HfTokenizerTest, ByteLevelBpeWithBothMergeForms) {
  const json llama3_pre = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array(
           {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Split}}}, {"behavior", "Isolated"}},
            byte_level(false)})}};
  for (const json& merges :
       {json::array({"a b", "\xC4\xA0 ab"}),
        json::array({json::array({"a", "b"}), json::array({"\xC4\xA0", "ab"})})}) {
    auto data = tokenizer_from_hf_json(toy_tokenizer(merges, llama3_pre).dump());
    ASSERT_TRUE(data.is_ok()) << data.status().to_string();
    EXPECT_EQ(data->model, "gpt2");
    EXPECT_EQ(data->pre, "llama-bpe");
    EXPECT_EQ(data->tokens, (std::vector<std::string>{"a", "b", "ab", "\xC4\xA0",
                                                      "\xC4\xA0"
                                                      "ab",
                                                      "<|begin|>", "<tool>"}));
    EXPECT_EQ(data->merges, (std::vector<std::string>{"a b", "\xC4\xA0 ab"}));
    EXPECT_EQ(data->token_types[0], TokenType::kNormal);
    EXPECT_EQ(data->token_types[5], TokenType::kControl);
    EXPECT_EQ(data->token_types[6], TokenType::kUserDefined);
    EXPECT_EQ(data->bos_id, 5);  // from the post-processor template
    EXPECT_TRUE(data->add_bos);
  }
}

TEST(HfTokenizerTest, RecognisesPreTokenizers) {
  const json merges = json::array({"a b"});
  const json smollm = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
  auto a = tokenizer_from_hf_json(toy_tokenizer(merges, smollm).dump());
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->pre, "smollm");
  auto b = tokenizer_from_hf_json(toy_tokenizer(merges, byte_level(true)).dump());
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->pre, "gpt2");
  std::string qwen = kLlama3Split;
  qwen.replace(qwen.find("\\p{N}{1,3}"), 10, "\\p{N}");
  const json qwen_pre = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", qwen}}}}, byte_level(false)})}};
  auto c = tokenizer_from_hf_json(toy_tokenizer(merges, qwen_pre).dump());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->pre, "qwen2");

  auto no_byte_level =
      tokenizer_from_hf_json(toy_tokenizer(merges, {{"type", "Whitespace"}}).dump());
  ASSERT_FALSE(no_byte_level.is_ok());
  EXPECT_NE(no_byte_level.status().message().find("ByteLevel"), std::string::npos);
  const json odd = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", "x+"}}}}, byte_level(false)})}};
  auto unknown = tokenizer_from_hf_json(toy_tokenizer(merges, odd).dump());
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("not recognised"), std::string::npos);
}

TEST(HfTokenizerTest, RefusesMalformedTokenizerJson) {
  const json pre = byte_level(true);
  EXPECT_FALSE(tokenizer_from_hf_json("{").is_ok());
  EXPECT_FALSE(tokenizer_from_hf_json("[]").is_ok());
  EXPECT_FALSE(tokenizer_from_hf_json(R"({"model": {"type": "Unigram"}})").is_ok());
  json spm_like = toy_tokenizer(json::array({"a b"}), pre);
  spm_like["model"]["byte_fallback"] = true;
  auto spm = tokenizer_from_hf_json(spm_like.dump());
  ASSERT_FALSE(spm.is_ok());
  EXPECT_NE(spm.status().message().find("tokenizer.model"), std::string::npos);

  EXPECT_FALSE(tokenizer_from_hf_json(toy_tokenizer(json::array({"a b c"}), pre).dump()).is_ok());
  EXPECT_FALSE(tokenizer_from_hf_json(toy_tokenizer(json::array({"ab"}), pre).dump()).is_ok());
  EXPECT_FALSE(
      tokenizer_from_hf_json(toy_tokenizer(json::array({json::array({"a"})}), pre).dump()).is_ok());
  json bad_id = toy_tokenizer(json::array({"a b"}), pre);
  bad_id["model"]["vocab"]["c"] = -4;
  EXPECT_FALSE(tokenizer_from_hf_json(bad_id.dump()).is_ok());
  bad_id["model"]["vocab"]["c"] = "seven";
  EXPECT_FALSE(tokenizer_from_hf_json(bad_id.dump()).is_ok());
  // Type mismatches inside otherwise valid structure: an error, not an exception.
  json bad_special = toy_tokenizer(json::array({"a b"}), pre);
  bad_special["added_tokens"][0]["special"] = "yes";
  EXPECT_FALSE(tokenizer_from_hf_json(bad_special.dump()).is_ok());
  json bad_regex = toy_tokenizer(json::array({"a b"}), pre);
  bad_regex["pre_tokenizer"] = {{"type", 7}};
  EXPECT_FALSE(tokenizer_from_hf_json(bad_regex.dump()).is_ok());
}

// Random edits of valid JSON documents: every parser returns a value or an error; none lets
// an exception escape (which would abort the converter).
TEST(HfTokenizerTest, CorruptedJsonNeverThrows) {
  const std::string tokenizer = toy_tokenizer(json::array({"a b"}), byte_level(true)).dump();
  const std::string config =
      R"({"bos_token": {"content": "a"}, "eos_token": "b", "chat_template": [{"name": "default", "template": "x"}], "add_bos_token": true})";
  const std::string model_config =
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})";
  const char kAlphabet[] = "{}[]\":,0123456789-.eEtrufalsn \\x";
  const auto parse_all = [](const std::string& text) {
    TokenizerData data;
    data.tokens = {"a", "b"};
    (void)tokenizer_from_hf_json(text);
    (void)apply_tokenizer_config(text, data);
    (void)parse_hf_config(text);
  };
  std::mt19937 rng(7);
  for (int iteration = 0; iteration < 600; ++iteration) {
    for (const std::string* source : {&tokenizer, &config, &model_config}) {
      std::string text = *source;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits; ++e) {
        text[rng() % text.size()] = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
      }
      EXPECT_NO_THROW(parse_all(text));
    }
  }
}

TEST(HfTokenizerTest, HolesInTheVocabularyBecomeUnusedPads) {
  json j = toy_tokenizer(json::array({"a b"}), byte_level(true));
  j["added_tokens"] = json::array({{{"id", 8}, {"content", "<end>"}, {"special", true}}});
  auto data = tokenizer_from_hf_json(j.dump());
  ASSERT_TRUE(data.is_ok()) << data.status().to_string();
  ASSERT_EQ(data->tokens.size(), 9u);
  EXPECT_EQ(data->tokens[5], "[PAD5]");
  EXPECT_EQ(data->token_types[5], TokenType::kUnused);
  EXPECT_EQ(data->tokens[8], "<end>");
}

TEST(HfTokenizerTest, TokenizerConfigSetsSpecialTokensAndTemplate) {
  auto data = tokenizer_from_hf_json(toy_tokenizer(json::array({"a b"}), byte_level(true)).dump());
  ASSERT_TRUE(data.is_ok());
  const json config = {{"bos_token", {{"__type", "AddedToken"}, {"content", "<|begin|>"}}},
                       {"eos_token", "<tool>"},
                       {"pad_token", nullptr},
                       {"add_bos_token", false},
                       {"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                                      {{"name", "default"}, {"template", "D"}}})}};
  ASSERT_TRUE(apply_tokenizer_config(config.dump(), *data).is_ok());
  EXPECT_EQ(data->bos_id, 5);
  EXPECT_EQ(data->eos_id, 6);
  EXPECT_FALSE(data->pad_id.has_value());
  EXPECT_FALSE(data->add_bos);
  EXPECT_EQ(data->chat_template, "D");

  auto missing = apply_tokenizer_config(R"({"eos_token": "<nope>"})", *data);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.message().find("not in the vocabulary"), std::string::npos);
  EXPECT_FALSE(apply_tokenizer_config(R"({"eos_token": 3})", *data).is_ok());
  EXPECT_FALSE(apply_tokenizer_config("nope", *data).is_ok());
}

TEST(HfTokenizerTest, PadVocabularyToTheEmbeddingRows) {
  TokenizerData data;
  data.model = "llama";
  data.tokens = {"<unk>", "a"};
  data.scores = {0.0f, -1.0f};
  data.token_types = {TokenType::kUnknown, TokenType::kNormal};
  ASSERT_TRUE(pad_vocabulary(data, 4).is_ok());
  EXPECT_EQ(data.tokens, (std::vector<std::string>{"<unk>", "a", "[PAD2]", "[PAD3]"}));
  EXPECT_EQ(data.scores.size(), 4u);
  EXPECT_EQ(data.token_types[3], TokenType::kUnused);
  auto too_many = pad_vocabulary(data, 3);
  ASSERT_FALSE(too_many.is_ok());
  EXPECT_NE(too_many.message().find("only 3 rows"), std::string::npos);
}

TEST(HfTokenizerTest, DirectoryLookup) {
  TempDir dir;
  auto none = read_hf_tokenizer(dir.path().string(), {8, std::nullopt, std::nullopt});
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("neither tokenizer.model"), std::string::npos);

  write_text(dir.path() / "tokenizer.json",
             toy_tokenizer(json::array({"a b"}), byte_level(true)).dump());
  write_text(dir.path() / "chat_template.jinja", "{{ messages }}");
  auto data = read_hf_tokenizer(dir.path().string(), {10, 0, 6});
  ASSERT_TRUE(data.is_ok()) << data.status().to_string();
  EXPECT_EQ(data->tokens.size(), 10u);  // padded to the embedding rows
  EXPECT_EQ(data->bos_id, 5);           // the template's, not config.json's
  EXPECT_EQ(data->eos_id, 6);           // config.json's
  EXPECT_EQ(data->chat_template, "{{ messages }}");

  // An SPM model wins over tokenizer.json.
  fs::copy_file(kFixtures / "llama2-tokenizer.model", dir.path() / "tokenizer.model");
  auto spm = read_hf_tokenizer(dir.path().string(), {32000, std::nullopt, std::nullopt});
  ASSERT_TRUE(spm.is_ok()) << spm.status().to_string();
  EXPECT_EQ(spm->model, "llama");
  auto too_small = read_hf_tokenizer(dir.path().string(), {31999, std::nullopt, std::nullopt});
  EXPECT_FALSE(too_small.is_ok());
}

}  // namespace
}  // namespace llamaserve
