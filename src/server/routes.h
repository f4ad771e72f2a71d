// The server's routes in one table: the HTTP layer registers a handler for each entry, the
// 405 logic and the metrics labels use it, and a unit test checks that /openapi.json
// documents exactly these operations.
#pragma once

#include <span>
#include <string_view>

namespace llamaserve::server {

enum class RouteId {
  kChatPage,
  kHealth,
  kReady,
  kMetrics,
  kOpenApi,
  kModels,
  kModel,
  kChatCompletions,
  kCompletions,
  kSimpleChat,
  kTokenize,
  kDetokenize,
  kEmbeddings,
};

struct Route {
  RouteId id;
  std::string_view method;    // "GET" / "POST"
  std::string_view path;      // OpenAPI form: /v1/models/{model}
  std::string_view pattern;   // cpp-httplib regex: /v1/models/([^/]+)
  bool requires_auth = true;  // with --api-key; /health never does
  bool served_while_draining = false;
};

std::span<const Route> route_table();

// The route for `method` and `path`, or nullptr. HEAD finds the GET routes (the transport answers
// it with their heads alone).
const Route* find_route(std::string_view method, std::string_view path);
// The first route whose pattern matches `path` with any method, or nullptr. Used for metrics
// labels (unknown paths share one label) and to tell 405 from 404.
const Route* route_for_path(std::string_view path);
inline bool path_has_route(std::string_view path) { return route_for_path(path) != nullptr; }

// The admin API (/admin/...) is not in the table: it exists only with --admin-api-key, has its
// own key, and is not part of the documented public API.
inline bool is_admin_path(std::string_view path) {
  return path == "/admin" || path.starts_with("/admin/");
}

}  // namespace llamaserve::server
