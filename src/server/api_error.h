// OpenAI-style error responses: every non-2xx body the server sends is
// {"error": {"message": ..., "type": ..., "code": ..., "param": ...}}.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace llamaserve::server {

struct ApiError {
  int http_status = 500;
  std::string type = "server_error";    // OpenAI's coarse class: invalid_request_error, ...
  std::string code = "internal_error";  // machine-readable reason
  std::string message;                  // what went wrong and what to do, for a person
  std::string param;                    // the offending request field; empty = null
  int retry_after_s = 0;                // > 0: sent as Retry-After (429, 503)
};

ApiError invalid_request(std::string message, std::string code = "invalid_value",
                         std::string param = {});
ApiError unauthorized(std::string message);
ApiError not_found(std::string message, std::string code);
ApiError method_not_allowed(std::string message);
ApiError payload_too_large(std::string message);
ApiError overloaded(std::string message, std::string code, int retry_after_s);
ApiError unavailable(std::string message, std::string code, int retry_after_s);
ApiError request_timeout(std::string message);
ApiError internal_error(std::string message);

// Maps a Status from a lower layer: invalid argument / out of range / unsupported -> 400,
// not found -> 404, resource exhausted -> 429, unavailable -> 503, deadline -> 408, cancelled
// -> 499 (client gone; never sent, only counted), everything else -> 500.
ApiError api_error_from_status(const Status& status);

// The request field an error message of the request parsers names first ("input" for
// "'input[3]' ...", "max_tokens" for "'max_tokens' must be ..."); empty when it names none.
std::string error_field(const Status& status);

// A request that failed to parse: api_error_from_status with the field the message names
// (error_field) as `param`, as OpenAI's SDKs show it.
ApiError request_error(const Status& status);

nlohmann::json error_json(const ApiError& error);
// The serialized body; never throws (invalid UTF-8 in a message is replaced).
std::string error_body(const ApiError& error);

}  // namespace llamaserve::server
