#include "server/embedding_request.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/api_error.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

// Expects a kInvalidArgument whose message mentions `needle` and names `field`.
void expect_rejected(const json& body, const std::string& needle, const std::string& field) {
  const Result<ParsedEmbeddings> result = parse_embeddings(body);
  ASSERT_FALSE(result.is_ok()) << "accepted: " << body.dump();
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find(needle), std::string::npos) << result.status().message();
  EXPECT_EQ(error_field(result.status()), field) << result.status().message();
}

TEST(ParseEmbeddings, AcceptsEveryInputForm) {
  auto one = parse_embeddings({{"input", "hello"}});
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(one->texts, std::vector<std::string>{"hello"});
  EXPECT_TRUE(one->token_inputs.empty());
  EXPECT_EQ(one->n_inputs(), 1u);
  EXPECT_EQ(one->encoding, EmbeddingEncoding::kFloat);

  auto texts = parse_embeddings({{"input", {"a", "b", "c"}}, {"model", "m"}, {"user", "u"}});
  ASSERT_TRUE(texts.is_ok());
  EXPECT_EQ(texts->texts, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(texts->model, "m");
  EXPECT_EQ(texts->user, "u");

  auto ids = parse_embeddings({{"input", {1, 2, 3}}, {"encoding_format", "base64"}});
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(ids->token_inputs, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(ids->encoding, EmbeddingEncoding::kBase64);

  auto lists = parse_embeddings(
      {{"input", {{1}, {2147483647, 0}}}, {"dimensions", 576}, {"encoding_format", nullptr}});
  ASSERT_TRUE(lists.is_ok());
  EXPECT_EQ(lists->token_inputs, (std::vector<std::vector<int32_t>>{{1}, {2147483647, 0}}));
  EXPECT_EQ(lists->dimensions, 576);
  EXPECT_EQ(lists->n_inputs(), 2u);

  const json many = {{"input", std::vector<std::string>(kMaxEmbeddingInputs, "x")}};
  EXPECT_TRUE(parse_embeddings(many).is_ok());
}

TEST(ParseEmbeddings, RejectsMissingAndEmptyInput) {
  expect_rejected(json::object(), "'input' is required", "input");
  expect_rejected({{"input", nullptr}}, "'input' is required", "input");
  expect_rejected({{"input", ""}}, "empty string", "input");
  expect_rejected({{"input", json::array()}}, "empty array", "input");
  expect_rejected({{"input", {"a", ""}}}, "'input[1]' must not be an empty string", "input");
  expect_rejected({{"input", {json::array()}}}, "'input[0]' must not be an empty array", "input");
  expect_rejected({{"input", {{1}, json::array()}}}, "'input[1]'", "input");
}

TEST(ParseEmbeddings, RejectsWrongTypes) {
  expect_rejected({{"input", 5}}, "'input' must be", "input");
  expect_rejected({{"input", {{"text", "a"}}}}, "'input' must be", "input");
  expect_rejected({{"input", {"a", 1}}}, "'input[1]' must be a string", "input");
  expect_rejected({{"input", {1, "a"}}}, "'input[1]' must be an integer", "input");
  expect_rejected({{"input", {{1}, "a"}}}, "'input[1]' must be an array", "input");
  expect_rejected({{"input", {{1}, {"a"}}}}, "'input[1][0]'", "input");
  expect_rejected({{"input", {1.5}}}, "'input[0]' must be an integer", "input");
  expect_rejected({{"input", {true}}}, "'input[0]'", "input");
  expect_rejected({{"input", {nullptr}}}, "'input[0]'", "input");
  expect_rejected({{"input", "a"}, {"model", 1}}, "'model'", "model");
  expect_rejected({{"input", "a"}, {"user", json::array()}}, "'user'", "user");
}

TEST(ParseEmbeddings, RejectsIdsOutsideInt32AndTooManyInputs) {
  expect_rejected({{"input", {-1}}}, "'input[0]' is not a valid token id", "input");
  expect_rejected({{"input", {1, 2147483648ll}}}, "'input[1]' is not a valid token id", "input");
  expect_rejected({{"input", {{1}, {3, -4}}}}, "'input[1][1]'", "input");
  const json too_many = {{"input", std::vector<std::string>(kMaxEmbeddingInputs + 1, "x")}};
  expect_rejected(too_many, "at most 2048", "input");
  const json too_many_lists = {
      {"input", std::vector<std::vector<int>>(kMaxEmbeddingInputs + 1, {1})}};
  expect_rejected(too_many_lists, "at most 2048", "input");
}

TEST(ParseEmbeddings, RejectsBadEncodingAndDimensions) {
  expect_rejected({{"input", "a"}, {"encoding_format", "int8"}}, "\"float\" or \"base64\"",
                  "encoding_format");
  expect_rejected({{"input", "a"}, {"encoding_format", 1}}, "'encoding_format'", "encoding_format");
  expect_rejected({{"input", "a"}, {"dimensions", 0}}, "'dimensions'", "dimensions");
  expect_rejected({{"input", "a"}, {"dimensions", -3}}, "'dimensions'", "dimensions");
  expect_rejected({{"input", "a"}, {"dimensions", "8"}}, "'dimensions'", "dimensions");
  expect_rejected({{"input", "a"}, {"dimensions", 2.5}}, "'dimensions'", "dimensions");
  expect_rejected({{"input", "a"}, {"dimensions", 4294967296ll}}, "'dimensions'", "dimensions");
}

TEST(ErrorField, NamesTheLeadingField) {
  EXPECT_EQ(error_field(Status(StatusCode::kInvalidArgument, "'input[3]' bad")), "input");
  EXPECT_EQ(error_field(Status(StatusCode::kInvalidArgument, "'dimensions' bad")), "dimensions");
  EXPECT_EQ(error_field(Status(StatusCode::kInvalidArgument, "invalid JSON")), "");
  EXPECT_EQ(error_field(Status(StatusCode::kInvalidArgument, "'")), "");
}

TEST(Base64Floats, EncodesLittleEndianFloat32) {
  EXPECT_EQ(base64_floats({}), "");
  const float one = 1.0f;  // 00 00 80 3f
  EXPECT_EQ(base64_floats(std::span(&one, 1)), "AACAPw==");
  const std::vector<float> two = {1.0f, -2.0f};  // 00 00 80 3f 00 00 00 c0
  EXPECT_EQ(base64_floats(two), "AACAPwAAAMA=");
  const std::vector<float> three = {0.5f, 0.25f, 3.0f};  // 12 bytes: no padding
  EXPECT_EQ(base64_floats(three), "AAAAPwAAgD4AAEBA");
}

TEST(EmbeddingsResponse, ListsEveryInputInOrder) {
  const std::vector<float> values = {0.6f, 0.8f, 1.0f, 0.0f};
  const json floats = embeddings_response(values, 2, EmbeddingEncoding::kFloat, "m", 7);
  EXPECT_EQ(floats["object"], "list");
  EXPECT_EQ(floats["model"], "m");
  EXPECT_EQ(floats["usage"], (json{{"prompt_tokens", 7}, {"total_tokens", 7}}));
  ASSERT_EQ(floats["data"].size(), 2u);
  EXPECT_EQ(floats["data"][1]["object"], "embedding");
  EXPECT_EQ(floats["data"][1]["index"], 1);
  EXPECT_EQ(floats["data"][0]["embedding"][0].get<float>(), 0.6f);  // the float exactly
  EXPECT_EQ(floats["data"][1]["embedding"], (json{1.0, 0.0}));
  // Through text and back, still the same float.
  EXPECT_EQ(json::parse(floats.dump())["data"][0]["embedding"][1].get<float>(), 0.8f);

  const json encoded = embeddings_response(values, 2, EmbeddingEncoding::kBase64, "m", 7);
  EXPECT_EQ(encoded["data"][1]["embedding"], base64_floats(std::span(values).subspan(2)));
}

}  // namespace
}  // namespace llamaserve::server
