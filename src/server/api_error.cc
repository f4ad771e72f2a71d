#include "server/api_error.h"

#include <utility>

namespace llamaserve::server {
namespace {

ApiError make(int http_status, std::string type, std::string code, std::string message,
              std::string param = {}, int retry_after_s = 0) {
  return ApiError{http_status,        std::move(type),  std::move(code),
                  std::move(message), std::move(param), retry_after_s};
}

}  // namespace

ApiError invalid_request(std::string message, std::string code, std::string param) {
  return make(400, "invalid_request_error", std::move(code), std::move(message), std::move(param));
}
ApiError unauthorized(std::string message) {
  return make(401, "authentication_error", "invalid_api_key", std::move(message));
}
ApiError not_found(std::string message, std::string code) {
  return make(404, "not_found_error", std::move(code), std::move(message));
}
ApiError method_not_allowed(std::string message) {
  return make(405, "invalid_request_error", "method_not_allowed", std::move(message));
}
ApiError payload_too_large(std::string message) {
  return make(413, "invalid_request_error", "request_too_large", std::move(message));
}
ApiError overloaded(std::string message, std::string code, int retry_after_s) {
  return make(429, "rate_limit_error", std::move(code), std::move(message), {}, retry_after_s);
}
ApiError unavailable(std::string message, std::string code, int retry_after_s) {
  return make(503, "service_unavailable_error", std::move(code), std::move(message), {},
              retry_after_s);
}
ApiError request_timeout(std::string message) {
  return make(408, "timeout_error", "request_timeout", std::move(message));
}
ApiError internal_error(std::string message) {
  return make(500, "server_error", "internal_error", std::move(message));
}

std::string error_field(const Status& status) {
  const std::string& message = status.message();
  if (message.size() < 2 || message.front() != '\'') return {};
  const size_t end = message.find_first_of("'[.", 1);
  return end == std::string::npos ? std::string() : message.substr(1, end - 1);
}

ApiError request_error(const Status& status) {
  ApiError error = api_error_from_status(status);
  if (error.http_status == 400 && error.param.empty()) error.param = error_field(status);
  return error;
}

ApiError api_error_from_status(const Status& status) {
  const std::string& message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument: return invalid_request(message);
    case StatusCode::kOutOfRange: return invalid_request(message, "out_of_range");
    case StatusCode::kUnsupported: return invalid_request(message, "unsupported_value");
    case StatusCode::kNotFound: return not_found(message, "not_found");
    case StatusCode::kResourceExhausted: return overloaded(message, "queue_full", 1);
    case StatusCode::kUnavailable: return unavailable(message, "unavailable", 1);
    case StatusCode::kDeadlineExceeded: return request_timeout(message);
    case StatusCode::kCancelled:
      return make(499, "invalid_request_error", "client_closed_request", message);
    case StatusCode::kOk:
    case StatusCode::kInternal:
    case StatusCode::kIo: break;
  }
  return internal_error(message.empty() ? "internal error" : message);
}

nlohmann::json error_json(const ApiError& error) {
  nlohmann::json body = {{"message", error.message}, {"type", error.type}, {"code", error.code}};
  body["param"] = error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param);
  return {{"error", std::move(body)}};
}

std::string error_body(const ApiError& error) {
  return error_json(error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace llamaserve::server
