#include "server/routes.h"

#include <array>
#include <string>

#include "http/message.h"

namespace llamaserve::server {
namespace {

constexpr std::array kRoutes = {
    // The chat page holds no secrets: served without a key, its API calls send one.
    Route{RouteId::kChatPage, "GET", "/", "/", false, false},
    Route{RouteId::kHealth, "GET", "/health", "/health", false, true},
    Route{RouteId::kReady, "GET", "/ready", "/ready", true, true},
    Route{RouteId::kMetrics, "GET", "/metrics", "/metrics", true, true},
    Route{RouteId::kOpenApi, "GET", "/openapi.json", "/openapi.json", true, false},
    Route{RouteId::kModels, "GET", "/v1/models", "/v1/models", true, false},
    Route{RouteId::kModel, "GET", "/v1/models/{model}", "/v1/models/([^/]+)", true, false},
    Route{RouteId::kChatCompletions, "POST", "/v1/chat/completions", "/v1/chat/completions", true,
          false},
    Route{RouteId::kCompletions, "POST", "/v1/completions", "/v1/completions", true, false},
    Route{RouteId::kSimpleChat, "POST", "/chat", "/chat", true, false},
    Route{RouteId::kTokenize, "POST", "/tokenize", "/tokenize", true, false},
    Route{RouteId::kDetokenize, "POST", "/detokenize", "/detokenize", true, false},
    Route{RouteId::kEmbeddings, "POST", "/v1/embeddings", "/v1/embeddings", true, false},
};

// Matches `path` against an OpenAPI-style route path segment by segment; a "{name}"
// segment matches any one non-empty segment. (Not std::regex: GCC 12 reports a
// maybe-uninitialized warning inside it in sanitizer builds.)
bool path_matches(std::string_view route_path, std::string_view path) {
  while (!route_path.empty() && !path.empty()) {
    const size_t route_end = route_path.find('/', 1);
    const size_t path_end = path.find('/', 1);
    const std::string_view route_segment = route_path.substr(0, route_end);
    const std::string_view path_segment = path.substr(0, path_end);
    const bool parameter =
        route_segment.size() > 3 && route_segment[1] == '{' && route_segment.back() == '}';
    if (parameter ? path_segment.size() < 2 || path_segment[0] != '/'
                  : route_segment != path_segment) {
      return false;
    }
    route_path.remove_prefix(route_segment.size());
    path.remove_prefix(path_segment.size());
  }
  return route_path.empty() && path.empty();
}

bool pattern_matches(const Route& route, std::string_view path) {
  return path_matches(route.path, path);
}

}  // namespace

std::span<const Route> route_table() { return kRoutes; }

const Route* find_route(std::string_view method, std::string_view path) {
  method = http::answering_method(method);
  for (const Route& route : kRoutes) {
    if (route.method == method && pattern_matches(route, path)) return &route;
  }
  return nullptr;
}

const Route* route_for_path(std::string_view path) {
  for (const Route& route : kRoutes) {
    if (pattern_matches(route, path)) return &route;
  }
  return nullptr;
}

}  // namespace llamaserve::server
