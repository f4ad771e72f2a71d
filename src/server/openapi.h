// GET /openapi.json: a hand-maintained OpenAPI 3.0 description of every route (routes.h).
// The document is written out in openapi.cc; the limits this server was started with, the
// model's name and its vocabulary size are filled in so that the schema states what the
// server really accepts.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace llamaserve::server {

struct OpenApiParams {
  int32_t max_tokens_limit = 4096;
  int32_t max_stop_strings = 16;
  int32_t max_top_logprobs = 20;
  int32_t max_embedding_inputs = 2048;  // kMaxEmbeddingInputs
  std::string model_name = "model";
  int32_t n_vocab = 0;        // 0 = not known yet (token ids documented up to INT32_MAX)
  bool auth_required = true;  // false (no --api-key): no security requirement, no 401s
};

nlohmann::json openapi_document(const OpenApiParams& params);

}  // namespace llamaserve::server
