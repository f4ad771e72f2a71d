#include "server/routes.h"

#include <array>
#include <regex>
#include <string>
#include <vector>

namespace llamaserve::server {
namespace {

constexpr std::array kRoutes = {
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
};

bool pattern_matches(const Route& route, std::string_view path) {
  static const std::vector<std::regex> compiled = [] {
    std::vector<std::regex> out;
    for (const Route& r : kRoutes) out.emplace_back(std::string(r.pattern));
    return out;
  }();
  const auto index = static_cast<size_t>(&route - kRoutes.data());
  return std::regex_match(path.begin(), path.end(), compiled[index]);
}

}  // namespace

std::span<const Route> route_table() { return kRoutes; }

const Route* find_route(std::string_view method, std::string_view path) {
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
