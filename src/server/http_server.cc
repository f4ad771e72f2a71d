#include "server/http_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "server/openapi.h"
#include "server/request_parser.h"
#include "server/response_format.h"
#include "tokenizer/unicode.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

std::string new_request_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

std::string_view id_prefix(RouteId id) {
  switch (id) {
    case RouteId::kChatCompletions: return "chatcmpl-";
    case RouteId::kCompletions: return "cmpl-";
    case RouteId::kSimpleChat: return "chat-";
    default: return "req-";
  }
}

// Compares without an early exit, so the time taken does not reveal how much of a key
// matched (only whether the lengths agree).
bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

// cpp-httplib 0.11 reads a request body only for POST, PUT, PATCH, DELETE and PRI. A body
// sent with any other method stays on the connection, where it would be parsed as the start
// of the next request.
bool body_left_unread(const httplib::Request& req) {
  static const std::set<std::string, std::less<>> kBodyMethods = {"POST", "PUT", "PATCH", "DELETE",
                                                                  "PRI"};
  if (kBodyMethods.contains(req.method)) return false;
  const std::string length = req.get_header_value("Content-Length");
  return (!length.empty() && length != "0") ||
         req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
}

// Makes httplib close the connection once this response is written. Version 0.11 has no API
// for it (a "Connection: close" response header alone does not do it), but it closes a
// connection whose content provider reports failure, so the body is moved into a provider
// that writes all of it and then reports failure.
void close_connection_after(httplib::Response& res) {
  auto body = std::make_shared<std::string>(std::move(res.body));
  res.body.clear();
  const std::string content_type = res.get_header_value("Content-Type");
  res.headers.erase("Content-Type");
  res.set_header("Connection", "close");
  res.set_content_provider(body->size(), content_type,
                           [body](size_t offset, size_t length, httplib::DataSink& sink) {
                             sink.write(body->data() + offset, length);
                             return false;
                           });
}

// Probes are polled constantly; their requests log at debug level.
bool is_probe(std::string_view endpoint) {
  return endpoint == "/health" || endpoint == "/ready" || endpoint == "/metrics";
}

}  // namespace

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.retry_after_s > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s));
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_body(error), "application/json");
}

HttpServer::HttpServer(const ServiceConfig& config)
    : options_(config.server),
      model_name_(config.models.front().served_name()),
      device_(config.models.front().layout.device),
      running_limit_(config.admission_limit() - config.server.max_queue),
      admission_limit_(config.admission_limit()),
      server_(std::make_unique<httplib::Server>()) {
  openapi_json_ = std::make_shared<const std::string>(build_openapi_json(0));
  const size_t threads = static_cast<size_t>(options_.http_threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  // Every idle keep-alive connection holds a pool thread until this runs out, and shutdown
  // waits for it too; 2 s keeps both short while still reusing connections of busy clients.
  server_->set_keep_alive_timeout(2);
  server_->set_keep_alive_max_count(100);
  server_->set_read_timeout(30);
  server_->set_write_timeout(30);
  if (!options_.cors_origin.empty()) {
    server_->set_default_headers({{"Access-Control-Allow-Origin", options_.cors_origin},
                                  {"Access-Control-Expose-Headers", "Retry-After, X-Request-Id"},
                                  {"Vary", "Origin"}});
  }
  register_routes();
  metrics_.set_ready(false);
  // Options are checked before the server is built; a device list that does not parse here
  // has no CUDA devices to report anyway.
  std::vector<int> cuda_devices;
  if (auto devices = parse_devices(device_); devices.is_ok()) {
    for (const DeviceChoice& device : *devices) {
      if (device.kind == DeviceChoice::Kind::kCuda) cuda_devices.push_back(device.index);
    }
  }
  if (!cuda_devices.empty()) {
    gpu_metrics_ =
        GpuMetrics::open(cuda_devices, GpuMetrics::kNvmlLibrary, options_.cuda_visible_devices);
  }
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::register_routes() {
  for (const Route& route : route_table()) {
    auto handler = [this, &route](const httplib::Request& req, httplib::Response& res) {
      dispatch(route, req, res);
    };
    const std::string pattern(route.pattern);
    if (route.method == "GET") {
      server_->Get(pattern, handler);
    } else {
      server_->Post(pattern, handler);
    }
  }
  if (!options_.cors_origin.empty()) {
    // Preflight: browsers send it without credentials, so it is answered before auth.
    server_->Options(".*", [](const httplib::Request& req, httplib::Response& res) {
      res.status = path_has_route(req.path) ? 204 : 404;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    });
  }
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        handle_error_response(req, res);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown exception";
        try {
          if (error) std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("http: {} {} failed: {}", req.method, req.path, what);
        send_error(res, internal_error("internal error; see the server log"));
      });
}

Status HttpServer::bind() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) port_ = 0;
  } else if (server_->bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  }
  if (port_ <= 0) {
    return make_error(StatusCode::kUnavailable, "cannot listen on {}:{} ({})", options_.host,
                      options_.port, std::strerror(errno));
  }
  return Status::ok();
}

void HttpServer::serve() { server_->listen_after_bind(); }

void HttpServer::start() {
  serve_thread_ = std::thread([this] {
    serve();
    serve_returned_ = true;
  });
}

void HttpServer::stop() {
  if (!server_) return;
  if (!serve_thread_.joinable()) {
    server_->stop();
    return;
  }
  // The listener only stops once its loop runs: a stop() that came first (a model that fails
  // to load at once) would be lost, and the serving thread would never end.
  while (!serve_returned_ && !server_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server_->stop();
  serve_thread_.join();
}

std::string HttpServer::build_openapi_json(int32_t n_vocab) const {
  OpenApiParams params;
  params.max_tokens_limit = options_.max_tokens_limit;
  params.model_name = model_name_;
  params.n_vocab = n_vocab;
  params.auth_required = !options_.api_keys.empty();
  return dump_json(openapi_document(params));
}

void HttpServer::set_model(std::shared_ptr<const ModelService> model) {
  auto openapi = std::make_shared<const std::string>(
      build_openapi_json(model ? model->tokenizer().n_vocab() : 0));
  {
    std::lock_guard lock(model_mutex_);
    model_ = std::move(model);
    openapi_json_ = std::move(openapi);
  }
  ready_ = model_ != nullptr && !draining_;
  metrics_.set_ready(ready_);
}

void HttpServer::release_model() {
  std::lock_guard lock(model_mutex_);
  model_.reset();
}

std::shared_ptr<const ModelService> HttpServer::served_model() const {
  std::lock_guard lock(model_mutex_);
  return model_;
}

void HttpServer::begin_drain() {
  draining_ = true;
  ready_ = false;
  metrics_.set_ready(false);
}

std::optional<InFlightCounter::Ticket> HttpServer::try_admit() {
  return admitted_.try_acquire(admission_limit_);
}

bool HttpServer::wait_until_idle(std::chrono::milliseconds timeout) {
  return active_generations_.wait_until_zero(timeout);
}

std::optional<ApiError> HttpServer::check_auth(const httplib::Request& req) const {
  if (options_.api_keys.empty()) return std::nullopt;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) {
    return unauthorized("missing API key: send 'Authorization: Bearer <key>'");
  }
  if (header.size() <= kBearer.size() || header.compare(0, kBearer.size(), kBearer) != 0) {
    return unauthorized("the Authorization header must be 'Bearer <key>'");
  }
  const std::string_view key = std::string_view(header).substr(kBearer.size());
  bool match = false;
  for (const std::string& accepted : options_.api_keys) match |= constant_time_equal(key, accepted);
  if (!match) return unauthorized("invalid API key");
  return std::nullopt;
}

void HttpServer::dispatch(const Route& route, const httplib::Request& req, httplib::Response& res) {
  RequestRecord record;
  record.id = new_request_id(id_prefix(route.id));
  record.endpoint = std::string(route.path);
  res.set_header("X-Request-Id", record.id);
  bool deferred = false;
  try {
    if (route.requires_auth) {
      if (auto denied = check_auth(req)) {
        send_error(res, *denied);
        record.status = res.status;
        record.error = denied->message;
        finish_record(record);
        return;
      }
    }
    if (draining_ && !route.served_while_draining) {
      send_error(res, unavailable("the server is shutting down", "draining", 0));
      close_connection_after(res);  // so that keep-alive clients reconnect elsewhere
    } else {
      deferred = handle_route(route, req, res, record);
      if (!deferred && body_left_unread(req)) close_connection_after(res);
    }
  } catch (const std::exception& e) {
    spdlog::error("http: {} {} (request {}) failed: {}", req.method, req.path, record.id, e.what());
    send_error(res, internal_error("internal error; see the server log"));
  }
  if (!deferred) {
    record.status = res.status;
    if (res.status >= 400 && record.error.empty()) {
      auto body = json::parse(res.body, nullptr, false);
      if (body.is_object() && body.contains("error") && body["error"].is_object()) {
        record.error = body["error"].value("message", "");
      }
    }
    finish_record(record);
  }
}

bool HttpServer::handle_route(const Route& route, const httplib::Request& req,
                              httplib::Response& res, RequestRecord& record) {
  switch (route.id) {
    case RouteId::kHealth: send_json(res, 200, {{"status", "ok"}}); return false;
    case RouteId::kReady: handle_ready(res); return false;
    case RouteId::kMetrics: handle_metrics(res); return false;
    case RouteId::kOpenApi: {
      std::shared_ptr<const std::string> document;
      {
        std::lock_guard lock(model_mutex_);
        document = openapi_json_;
      }
      res.status = 200;
      res.set_content(*document, "application/json");
      return false;
    }
    case RouteId::kModels: handle_models(req, res, false); return false;
    case RouteId::kModel: handle_models(req, res, true); return false;
    case RouteId::kTokenize: handle_tokenize(req, res); return false;
    case RouteId::kDetokenize: handle_detokenize(req, res); return false;
    case RouteId::kChatCompletions:
    case RouteId::kCompletions:
    case RouteId::kSimpleChat: return handle_generation(route, req, res, record);
  }
  send_error(res, internal_error("route without a handler"));
  return false;
}

void HttpServer::handle_error_response(const httplib::Request& req, httplib::Response& res) {
  // Responses built by dispatch() carry X-Request-Id (their body may already have moved into
  // a content provider); only httplib's own errors arrive here without one.
  if (res.has_header("X-Request-Id") || !res.body.empty()) return;
  // cpp-httplib parses only the methods it knows; for others (QUERY, ...) it leaves `path`
  // empty, so the path is taken from the request target.
  const std::string path = req.path.empty() ? req.target.substr(0, req.target.find('?')) : req.path;
  static const std::set<std::string, std::less<>> kParsedMethods = {
      "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "PRI"};
  // 404 from httplib: no handler for this method and path. 400 for TRACE and CONNECT (no
  // handler tables at all) and for methods it does not know: also "no handler" when the
  // request line itself was well formed.
  const bool unhandled_method =
      req.method == "TRACE" || req.method == "CONNECT" ||
      (!req.method.empty() && !req.target.empty() && !kParsedMethods.contains(req.method));
  const int httplib_status = res.status;
  const bool no_handler = res.status == 404 || (res.status == 400 && unhandled_method);
  const Route* route = route_for_path(path);
  ApiError error;
  if (no_handler && route != nullptr) {
    std::string allowed;
    for (const Route& candidate : route_table()) {
      if (find_route(candidate.method, path) == &candidate) {
        allowed += allowed.empty() ? "" : ", ";
        allowed += candidate.method;
      }
    }
    error =
        method_not_allowed(fmt::format("{} does not accept {}; use {}", path, req.method, allowed));
    res.set_header("Allow", allowed);
  } else if (no_handler) {
    error = not_found(fmt::format("no route {} {}; see GET /openapi.json", req.method, path),
                      "route_not_found");
  } else if (res.status == 413) {
    error = payload_too_large(fmt::format(
        "the request body is larger than this server accepts ({} bytes, --max-body-bytes)",
        options_.max_body_bytes));
  } else if (res.status >= 500) {
    error = internal_error(fmt::format("HTTP {}", res.status));
    error.http_status = res.status;
  } else {
    error = invalid_request(fmt::format("malformed HTTP request (status {})", res.status),
                            "invalid_http_request");
    error.http_status = res.status;
  }
  send_error(res, error);
  if (httplib_status == 400 || httplib_status == 413 || body_left_unread(req)) {
    // httplib gave up on the request, or left its body unread: what follows on the
    // connection is not the start of a request.
    close_connection_after(res);
  }

  RequestRecord record;
  record.id = new_request_id("req-");
  res.set_header("X-Request-Id", record.id);
  record.endpoint = route != nullptr ? std::string(route->path) : "other";
  record.status = res.status;
  record.error = error.message;
  finish_record(record);
}

void HttpServer::finish_record(RequestRecord& record) {
  metrics_.record_request(record.endpoint, record.status);
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - record.start)
          .count();
  const auto level = is_probe(record.endpoint) ? spdlog::level::debug : spdlog::level::info;
  spdlog::log(level,
              "request id={} endpoint={} status={} prompt_tokens={} completion_tokens={} "
              "ttft_ms={:.1f} total_ms={:.1f}{}{}{}",
              record.id, record.endpoint, record.status, record.prompt_tokens,
              record.completion_tokens, record.ttft_ms < 0 ? 0.0 : record.ttft_ms, total_ms,
              record.finish_reason.empty() ? "" : " finish=", record.finish_reason,
              record.error.empty() ? "" : fmt::format(" error=\"{}\"", record.error));
}

void HttpServer::handle_ready(httplib::Response& res) {
  if (ready_) {
    send_json(res, 200, {{"status", "ready"}});
  } else if (draining_) {
    send_error(res, unavailable("the server is shutting down", "draining", 0));
  } else {
    send_error(res, unavailable("the model is loading", "loading", 1));
  }
}

void HttpServer::handle_metrics(httplib::Response& res) {
  MetricsSnapshot snapshot;
  if (auto model = served_model()) {
    snapshot.engine = model->engines().stats();
    for (size_t i = 0; i < model->engines().size(); ++i) {
      snapshot.replicas.push_back(model->engines().replica_stats(i));
    }
  }
  if (gpu_metrics_) snapshot.gpus = gpu_metrics_->sample();
  res.status = 200;
  res.set_content(metrics_.render(snapshot), "text/plain; version=0.0.4");
}

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res, bool single) {
  auto model = served_model();
  json entry = {{"id", model_name_},
                {"object", "model"},
                {"created", model ? model->created() : 0},
                {"owned_by", "llamaserve"}};
  if (model) entry["context_length"] = model->engines().max_context();
  if (!single) {
    send_json(res, 200, {{"object", "list"}, {"data", json::array({entry})}});
    return;
  }
  const std::string requested = req.matches.size() > 1 ? req.matches[1].str() : std::string();
  if (requested != model_name_) {
    send_error(res, not_found(fmt::format("model '{}' is not served here; this server serves '{}'",
                                          unicode::sanitize_utf8(requested), model_name_),
                              "model_not_found"));
    return;
  }
  send_json(res, 200, entry);
}

void HttpServer::handle_tokenize(const httplib::Request& req, httplib::Response& res) {
  auto model = served_model();
  if (!model) return send_error(res, unavailable("the model is loading", "loading", 1));
  auto body = parse_json_object(req.body);
  if (!body) return send_error(res, api_error_from_status(body.status()));
  auto parsed = parse_tokenize(*body);
  if (!parsed) return send_error(res, api_error_from_status(parsed.status()));
  std::vector<int32_t> tokens =
      model->tokenizer().encode(parsed->content, parsed->add_special, parsed->parse_special);
  send_json(res, 200, {{"tokens", tokens}});
}

void HttpServer::handle_detokenize(const httplib::Request& req, httplib::Response& res) {
  auto model = served_model();
  if (!model) return send_error(res, unavailable("the model is loading", "loading", 1));
  auto body = parse_json_object(req.body);
  if (!body) return send_error(res, api_error_from_status(body.status()));
  auto tokens = parse_detokenize(*body);
  if (!tokens) return send_error(res, api_error_from_status(tokens.status()));
  const int32_t n_vocab = model->tokenizer().n_vocab();
  for (size_t i = 0; i < tokens->size(); ++i) {
    if ((*tokens)[i] >= n_vocab) {
      return send_error(res, invalid_request(fmt::format("'tokens[{}]' = {} is outside the "
                                                         "vocabulary (0..{})",
                                                         i, (*tokens)[i], n_vocab - 1),
                                             "invalid_value", "tokens"));
    }
  }
  const std::string text = model->tokenizer().decode(*tokens, /*skip_special=*/false);
  send_json(res, 200, {{"content", unicode::sanitize_utf8(text)}});
}

}  // namespace llamaserve::server
