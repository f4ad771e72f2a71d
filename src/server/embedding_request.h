// POST /v1/embeddings: parsing and validation of the body into a plain struct, and the
// response body. Pure functions of the JSON, like request_parser.h: what needs the model (the
// vocabulary, the context, n_embd) is checked by the route. Unknown fields are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace llamaserve::server {

// Inputs per request: OpenAI's limit. Each becomes a sequence of the engine; more belong in
// several requests.
constexpr size_t kMaxEmbeddingInputs = 2048;

enum class EmbeddingEncoding { kFloat, kBase64 };

struct ParsedEmbeddings {
  std::string model;  // empty: not given
  // "input": texts (a string or a list of strings), or token id lists (a list of ids is one
  // input). Exactly one of the two is non-empty; every element is non-empty.
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_inputs;  // ids in [0, INT32_MAX]; vocabulary unchecked
  EmbeddingEncoding encoding = EmbeddingEncoding::kFloat;
  std::optional<int64_t> dimensions;  // >= 1; the route accepts only the model's n_embd
  std::string user;

  size_t n_inputs() const { return texts.empty() ? token_inputs.size() : texts.size(); }
};

// 400-class Status (kInvalidArgument) naming the field for: a missing or null "input", an
// empty string or list, an element of the wrong type (lists must be all strings, all ids or
// all id lists), ids outside [0, INT32_MAX], more than kMaxEmbeddingInputs inputs, an
// "encoding_format" other than "float" / "base64", a "dimensions" that is not an integer >= 1,
// non-string "model" or "user".
Result<ParsedEmbeddings> parse_embeddings(const nlohmann::json& body);

// Standard base64 (RFC 4648, padded) of the values as little-endian float32 bytes: OpenAI's
// encoding_format "base64".
std::string base64_floats(std::span<const float> values);

// {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}], "model",
// "usage": {"prompt_tokens", "total_tokens"}}: `embeddings` holds one row of n_embd per input.
// PRECONDITION: embeddings.size() is a multiple of n_embd >= 1.
nlohmann::json embeddings_response(std::span<const float> embeddings, size_t n_embd,
                                   EmbeddingEncoding encoding, const std::string& model,
                                   int32_t prompt_tokens);

}  // namespace llamaserve::server
