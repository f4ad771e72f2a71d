// The admin API, present only with --admin-api-key: the models' lifecycle by hand.
//   GET  /admin/models                    every model with its state, path, load counts
//   POST /admin/models/{name}/load        load (waits for it)
//   POST /admin/models/{name}/unload      unload; requests in flight finish on it
//   POST /admin/models/{name}/reload      new version beside the old one, then swap;
//                                         body {"path": "..."} serves another file
#include <spdlog/spdlog.h>

#include "server/http_server.h"
#include "server/request_parser.h"
#include "tokenizer/unicode.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

struct AdminTarget {
  std::string_view method;  // the one the operation takes
  std::string model;        // empty for GET /admin/models
  std::string action;       // load | unload | reload
};

// Parses the admin path; nullopt when it names no admin operation.
std::optional<AdminTarget> admin_operation(const std::string& path) {
  if (path == "/admin/models") return AdminTarget{"GET", {}, {}};
  constexpr std::string_view kPrefix = "/admin/models/";
  if (!path.starts_with(kPrefix)) return std::nullopt;
  const std::string rest = path.substr(kPrefix.size());
  const size_t slash = rest.rfind('/');
  if (slash == std::string::npos || slash == 0) return std::nullopt;
  AdminTarget target{"POST", http::percent_decode(rest.substr(0, slash)), rest.substr(slash + 1)};
  if (target.action != "load" && target.action != "unload" && target.action != "reload") {
    return std::nullopt;
  }
  return target;
}

// Whether `method` is the one `operation` takes (HEAD for GET).
bool takes(const AdminTarget& operation, std::string_view method) {
  return operation.method == http::answering_method(method);
}

// The operation of `path` when `method` is the one it takes, else nullopt.
std::optional<AdminTarget> admin_target(const std::string& method, const std::string& path) {
  std::optional<AdminTarget> target = admin_operation(path);
  if (!target || !takes(*target, method)) return std::nullopt;
  return target;
}

ApiError forbidden(std::string message) {
  ApiError error;
  error.http_status = 403;
  error.type = "permission_error";
  error.code = "admin_key_required";
  error.message = std::move(message);
  return error;
}

json admin_entry(const ModelStatus& status) {
  json entry = {{"id", status.name},
                {"state", model_state_name(status.state)},
                {"path", unicode::sanitize_utf8(status.path)},
                {"required", status.required},
                {"in_flight", status.in_flight},
                {"loads", status.loads},
                {"load_failures", status.load_failures},
                {"last_load_seconds", status.last_load_seconds}};
  if (status.context_tokens > 0) entry["context_length"] = status.context_tokens;
  if (!status.error.empty()) entry["error"] = unicode::sanitize_utf8(status.error);
  return entry;
}

}  // namespace

std::optional<http::Response> HttpServer::check_admin_head(const http::Request& head) {
  if (options_.admin_api_keys.empty() || !is_admin_path(head.path)) return std::nullopt;
  const std::optional<AdminTarget> operation = admin_operation(head.path);
  if (!operation) {
    return refuse(not_found(fmt::format("no admin operation {} {}",
                                        unicode::sanitize_utf8(head.method.substr(0, 32)),
                                        unicode::sanitize_utf8(head.path.substr(0, 256))),
                            "route_not_found"),
                  head, "/admin/models", "admin-");
  }
  if (!takes(*operation, head.method)) {
    const std::string allowed = operation->method == "GET" ? "GET, HEAD" : "POST";
    http::Response response = refuse(
        method_not_allowed(fmt::format("{} does not accept {}; use {}",
                                       unicode::sanitize_utf8(head.path.substr(0, 256)),
                                       unicode::sanitize_utf8(head.method.substr(0, 32)), allowed)),
        head, "/admin/models", "admin-");
    response.set_header("Allow", allowed);
    return response;
  }
  const std::string_view header = head.header("Authorization").value_or("");
  const size_t space = header.find(' ');
  if (header.empty() || space == std::string_view::npos ||
      !http::iequals(header.substr(0, space), "Bearer")) {
    http::Response response =
        refuse(unauthorized("the admin API needs 'Authorization: Bearer <admin key>'"), head,
               "/admin/models", "admin-");
    return response;
  }
  std::string_view key = header.substr(space);
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  bool match = false;
  for (const std::string& accepted : options_.admin_api_keys)
    match |= constant_time_equal(key, accepted);
  if (!match) {
    return refuse(forbidden("this key may not use the admin API (--admin-api-key)"), head,
                  "/admin/models", "admin-");
  }
  if (draining_) {
    return refuse(unavailable("the server is shutting down", "draining", 0), head, "/admin/models",
                  "admin-");
  }
  return std::nullopt;
}

void HttpServer::handle_admin(http::Exchange& exchange, http::Response& res) {
  const http::Request& req = exchange.request();
  const auto target = admin_target(req.method, req.path);
  auto models = registry();
  if (!target || !models) {
    return send_error(res, unavailable("the models are not set up yet", "loading", 1));
  }
  auto entry_of = [&](const std::string& name) {
    for (const ModelStatus& status : models->status()) {
      if (status.name == name) return admin_entry(status);
    }
    return json();
  };
  if (target->model.empty()) {
    json data = json::array();
    for (const ModelStatus& status : models->status()) data.push_back(admin_entry(status));
    return send_json(res, 200, {{"object", "list"}, {"data", data}});
  }
  std::optional<std::string> path;
  if (target->action == "reload" && !req.body.empty()) {
    auto body = parse_json_object(req.body);
    if (!body) return send_error(res, api_error_from_status(body.status()));
    if (auto it = body->find("path"); it != body->end()) {
      if (!it->is_string() || it->get<std::string>().empty()) {
        return send_error(
            res, invalid_request("'path' must be a non-empty string", "invalid_value", "path"));
      }
      path = it->get<std::string>();
    }
  }
  spdlog::info("admin: {} '{}'{}", target->action, target->model,
               path ? fmt::format(" from {}", *path) : "");
  Status done;
  if (target->action == "load") {
    done = models->load(target->model);
  } else if (target->action == "unload") {
    done = models->unload(target->model);
  } else {
    done = models->reload(target->model, path);
  }
  if (done.code() == StatusCode::kNotFound) {
    return send_error(res, not_found(done.message(), "model_not_found"));
  }
  if (!done.is_ok()) {
    ApiError error = unavailable(
        fmt::format("{} of '{}' failed: {}{}", target->action, target->model, done.message(),
                    target->action == "reload" ? "; the previous version keeps serving" : ""),
        "model_load_failed", 0);
    if (done.code() == StatusCode::kResourceExhausted) error.code = "model_capacity";
    return send_error(res, error);
  }
  send_json(res, 200, entry_of(target->model));
}

}  // namespace llamaserve::server
