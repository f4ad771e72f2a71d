// GET /openapi.json: a hand-maintained OpenAPI 3.0 description of every route (routes.h).
// The document is written out in openapi.cc; the limits this server was started with are
// filled in at startup so that the schema states what the server really accepts.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace llamaserve::server {

struct OpenApiLimits {
  int32_t max_tokens_limit = 4096;
  int32_t max_stop_strings = 16;
  int32_t max_top_logprobs = 20;
};

nlohmann::json openapi_document(const OpenApiLimits& limits);

}  // namespace llamaserve::server
