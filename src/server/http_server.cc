#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>

#include "core/log.h"
#include "server/embedded_page.h"
#include "server/embedding_request.h"
#include "server/openapi.h"
#include "server/request_parser.h"
#include "server/response_format.h"
#include "tokenizer/unicode.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

// What a request for a model is told before the models are loaded.
constexpr const char* kModelsLoading = "the models are loading; retry when GET /ready answers 200";

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

// Probes are polled constantly; their requests log at debug level.
bool is_probe(std::string_view endpoint) {
  return endpoint == "/health" || endpoint == "/ready" || endpoint == "/metrics";
}

}  // namespace

// Compares without an early exit, so the time taken does not reveal how much of a key
// matched (only whether the lengths agree).
bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

void send_json(http::Response& res, int status, const json& body) {
  res.status = status;
  res.set_header("Content-Type", "application/json");
  res.body = dump_json(body);
}

void send_error(http::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.retry_after_s > 0) res.set_header("Retry-After", std::to_string(error.retry_after_s));
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_header("Content-Type", "application/json");
  res.body = error_body(error);
}

namespace {

http::ConnectionLimits connection_limits(const ServerConfig& options) {
  http::ConnectionLimits limits;
  limits.request.max_body_bytes = static_cast<uint64_t>(options.max_body_bytes);
  limits.request.max_header_bytes = static_cast<uint32_t>(options.max_header_bytes);
  limits.request.max_request_line_bytes =
      std::min<uint32_t>(limits.request.max_request_line_bytes, limits.request.max_header_bytes);
  limits.request.max_header_line_bytes =
      std::min<uint32_t>(limits.request.max_header_line_bytes, limits.request.max_header_bytes);
  limits.max_connections = options.max_connections;
  limits.idle_timeout = std::chrono::milliseconds(options.idle_timeout_ms);
  limits.header_timeout = std::chrono::milliseconds(options.header_timeout_ms);
  limits.body_timeout = std::chrono::milliseconds(options.body_timeout_ms);
  limits.write_timeout = std::chrono::milliseconds(options.write_timeout_ms);
  return limits;
}

}  // namespace

HttpServer::HttpServer(const ServiceConfig& config)
    : options_(config.server),
      model_name_(config.models.front().served_name()),
      device_(config.models.front().layout.device),
      running_limit_(config.admission_limit() - config.server.max_queue),
      admission_limit_(config.admission_limit()) {
  openapi_json_ = std::make_shared<const std::string>(build_openapi_json(0));
  metrics_.set_ready(false);
  // Options are checked before the server is built; a device list that does not parse here
  // has no CUDA devices to report anyway.
  std::vector<int> cuda_devices;
  if (auto devices = parse_devices(device_); devices.is_ok()) {
    for (const DeviceChoice& device : *devices) {
      if (device.kind == DeviceChoice::Kind::kCuda) cuda_devices.push_back(device.index);
    }
  }
  // Only a CUDA build has device pools to count.
  for (const ModelSpec& spec : config.models) {
    if (!cuda_build()) break;
    if (auto devices = parse_devices(spec.layout.device); devices.is_ok()) {
      for (const DeviceChoice& device : *devices) {
        uses_cuda_ |= device.kind == DeviceChoice::Kind::kCuda;
      }
    }
  }
  if (!cuda_devices.empty()) {
    gpu_metrics_ =
        GpuMetrics::open(cuda_devices, GpuMetrics::kNvmlLibrary, options_.cuda_visible_devices);
  }
  transport_ = std::make_unique<http::Transport>(connection_limits(options_), options_.http_threads,
                                                 static_cast<http::Handler&>(*this));
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  LS_RETURN_IF_ERROR(transport_->listen(options_.host, options_.port));
  port_ = transport_->port();
  return Status::ok();
}

void HttpServer::start() { transport_->start(); }

void HttpServer::stop() {
  if (transport_) transport_->stop();
}

std::string HttpServer::build_openapi_json(int32_t n_vocab) const {
  OpenApiParams params;
  params.max_tokens_limit = options_.max_tokens_limit;
  params.max_embedding_inputs = static_cast<int32_t>(kMaxEmbeddingInputs);
  params.model_name = model_name_;
  params.n_vocab = n_vocab;
  params.auth_required = !options_.api_keys.empty();
  return dump_json(openapi_document(params));
}

void HttpServer::set_registry(std::shared_ptr<ModelRegistry> registry) {
  std::lock_guard lock(model_mutex_);
  registry_ = std::move(registry);
}

void HttpServer::release_models() {
  std::lock_guard lock(model_mutex_);
  registry_.reset();
}

std::shared_ptr<ModelRegistry> HttpServer::registry() const {
  std::lock_guard lock(model_mutex_);
  return registry_;
}

bool HttpServer::is_ready() const {
  if (draining_) return false;
  auto models = registry();
  return models != nullptr && models->ready();
}

std::optional<nlohmann::json> HttpServer::model_request_body(const http::Request& req,
                                                             http::Response& res) {
  if (!registry()) {
    send_error(res, unavailable(kModelsLoading, "loading", 1));
    return std::nullopt;
  }
  auto body = parse_json_object(req.body);
  if (!body) {
    send_error(res, api_error_from_status(body.status()));
    return std::nullopt;
  }
  return std::move(*body);
}

Result<ModelLease> HttpServer::lease_model(const std::string& name) {
  auto models = registry();
  if (!models) {
    return Status(StatusCode::kUnavailable, kModelsLoading);
  }
  const std::string& wanted = name.empty() ? models->default_model() : name;
  return models->acquire(wanted, std::chrono::milliseconds(options_.queue_timeout_ms));
}

void HttpServer::begin_drain() {
  draining_ = true;
  transport_->begin_drain();
  metrics_.set_ready(false);
}

std::optional<InFlightCounter::Ticket> HttpServer::try_admit() {
  return admitted_.try_acquire(admission_limit_);
}

ApiError HttpServer::at_capacity() const {
  return overloaded(fmt::format("the server is at capacity ({} running + {} queued requests); "
                                "retry later",
                                running_limit_, options_.max_queue),
                    "queue_full", 1);
}

ApiError HttpServer::submit_refused(const Status& status) const {
  if (status.code() == StatusCode::kResourceExhausted) return at_capacity();
  if (status.code() == StatusCode::kUnavailable) {
    return unavailable("the server is shutting down", "draining", 0);
  }
  return api_error_from_status(status);
}

bool HttpServer::wait_until_idle(std::chrono::milliseconds timeout) {
  return active_generations_.wait_until_zero(timeout);
}

std::optional<ApiError> HttpServer::check_auth(const http::Request& head) const {
  if (options_.api_keys.empty()) return std::nullopt;
  const std::string_view header = head.header("Authorization").value_or("");
  if (header.empty()) {
    return unauthorized("missing API key: send 'Authorization: Bearer <key>'");
  }
  // RFC 9110 §11.1: the scheme is case-insensitive; one or more spaces follow it.
  constexpr std::string_view kBearer = "Bearer";
  const size_t space = header.find(' ');
  if (space == std::string_view::npos || !http::iequals(header.substr(0, space), kBearer)) {
    return unauthorized("the Authorization header must be 'Bearer <key>'");
  }
  std::string_view key = header.substr(space);
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
  bool match = false;
  for (const std::string& accepted : options_.api_keys) match |= constant_time_equal(key, accepted);
  if (!match) return unauthorized("invalid API key");
  return std::nullopt;
}

RequestRecord HttpServer::new_record(const http::Request& head, std::string_view id_prefix,
                                     std::string endpoint) {
  RequestRecord record;
  record.id = new_request_id(id_prefix);
  record.endpoint = std::move(endpoint);
  record.client_id = accepted_request_id(head.header("X-Request-Id").value_or(""));
  record.traceparent = parse_traceparent(head.header("traceparent").value_or(""));
  return record;
}

void HttpServer::decorate(http::Response& response, const RequestRecord& record) const {
  response.set_header("X-Request-Id", record.client_id.empty() ? record.id : record.client_id);
  if (!record.traceparent.header.empty()) {
    response.set_header("traceparent", record.traceparent.header);
  }
  if (!options_.cors_origin.empty()) {
    response.set_header("Access-Control-Allow-Origin", options_.cors_origin);
    response.set_header("Access-Control-Expose-Headers", "Retry-After, X-Request-Id, traceparent");
    response.set_header("Vary", "Origin");
  }
}

http::Response HttpServer::refuse(const ApiError& error, const http::Request& head,
                                  const std::string& endpoint, std::string_view prefix) {
  RequestRecord record = new_record(head, prefix, endpoint);
  record.status = error.http_status;
  record.error = error.message;
  http::Response response;
  send_error(response, error);
  decorate(response, record);
  finish_record(record);
  return response;
}

std::optional<http::Response> HttpServer::check_head(const http::Request& head) {
  if (auto admin = check_admin_head(head)) return admin;
  if (!options_.admin_api_keys.empty() && is_admin_path(head.path)) return std::nullopt;
  const Route* route = find_route(head.method, head.path);
  const Route* any_method = route != nullptr ? route : route_for_path(head.path);
  const std::string endpoint = any_method != nullptr ? std::string(any_method->path) : "other";
  if (head.method == "OPTIONS" && !options_.cors_origin.empty()) {
    // Preflight: browsers send it without credentials, so it is answered before auth.
    http::Response response;
    response.status = any_method != nullptr ? 204 : 404;
    response.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    response.set_header("Access-Control-Allow-Headers",
                        "Authorization, Content-Type, X-Request-Id, traceparent");
    response.set_header("Access-Control-Max-Age", "600");
    RequestRecord record = new_record(head, "req-", endpoint);
    record.status = response.status;
    decorate(response, record);
    finish_record(record);
    return response;
  }
  if (route == nullptr && any_method != nullptr) {
    std::string allowed;
    for (const Route& candidate : route_table()) {
      if (find_route(candidate.method, head.path) == &candidate) {
        allowed += allowed.empty() ? "" : ", ";
        allowed += candidate.method;
        if (candidate.method == "GET") allowed += ", HEAD";
      }
    }
    const std::string method = unicode::sanitize_utf8(head.method.substr(0, 32));
    http::Response response = refuse(method_not_allowed(fmt::format("{} does not accept {}; use {}",
                                                                    head.path, method, allowed)),
                                     head, endpoint, "req-");
    response.set_header("Allow", allowed);
    return response;
  }
  if (route == nullptr) {
    return refuse(not_found(fmt::format("no route {} {}; see GET /openapi.json",
                                        unicode::sanitize_utf8(head.method.substr(0, 32)),
                                        unicode::sanitize_utf8(head.path.substr(0, 256))),
                            "route_not_found"),
                  head, endpoint, "req-");
  }
  if (route->requires_auth) {
    if (auto denied = check_auth(head)) {
      return refuse(*denied, head, endpoint, id_prefix(route->id));
    }
  }
  if (draining_ && !route->served_while_draining) {
    http::Response response = refuse(unavailable("the server is shutting down", "draining", 0),
                                     head, endpoint, id_prefix(route->id));
    response.set_header("Connection", "close");  // so that keep-alive clients reconnect elsewhere
    return response;
  }
  return std::nullopt;
}

http::Response HttpServer::refusal(const http::HttpError& error, const http::Request& head) {
  ApiError api_error;
  switch (error.status) {
    case 408: api_error = request_timeout(error.message); break;
    case 413: api_error = payload_too_large(error.message); break;
    default: {
      const char* code = "invalid_http_request";
      switch (error.status) {
        case 414: code = "request_line_too_long"; break;
        case 415: code = "unsupported_content_encoding"; break;
        case 417: code = "unsupported_expectation"; break;
        case 431: code = "headers_too_large"; break;
        case 501: code = "unsupported_transfer_encoding"; break;
        case 505: code = "unsupported_http_version"; break;
        default: break;
      }
      api_error = invalid_request(error.message, code);
      api_error.http_status = error.status;
      break;
    }
  }
  const Route* route = head.path.empty() ? nullptr : route_for_path(head.path);
  return refuse(api_error, head, route != nullptr ? std::string(route->path) : "other", "req-");
}

void HttpServer::handle(std::shared_ptr<http::Exchange> exchange) {
  const http::Request& req = exchange->request();
  if (is_admin_path(req.path) && !options_.admin_api_keys.empty()) {
    RequestRecord record = new_record(req, "admin-", "/admin/models");
    http::Response res;
    try {
      handle_admin(*exchange, res);
    } catch (const std::exception& e) {
      spdlog::error("http: {} {} failed: {}", req.method, req.path, e.what());
      send_error(res, internal_error("internal error; see the server log"));
    }
    decorate(res, record);
    record.status = res.status;
    exchange->respond(std::move(res));
    finish_record(record);
    return;
  }
  const Route* route = find_route(req.method, req.path);
  RequestRecord record = new_record(req, id_prefix(route->id), std::string(route->path));
  http::Response res;
  bool answered = false;
  try {
    answered = handle_route(*route, *exchange, res, record);
  } catch (const std::exception& e) {
    spdlog::error("http: {} {} (request {}) failed: {}", req.method, req.path, record.id, e.what());
    send_error(res, internal_error("internal error; see the server log"));
  }
  if (answered) return;  // a generation session answered and recorded it
  decorate(res, record);
  record.status = res.status;
  if (res.status >= 400 && record.error.empty()) {
    auto body = json::parse(res.body, nullptr, false);
    if (body.is_object() && body.contains("error") && body["error"].is_object()) {
      record.error = body["error"].value("message", "");
    }
  }
  exchange->respond(std::move(res));
  finish_record(record);
}

bool HttpServer::handle_route(const Route& route, http::Exchange& exchange, http::Response& res,
                              RequestRecord& record) {
  const http::Request& req = exchange.request();
  switch (route.id) {
    case RouteId::kChatPage: handle_chat_page(res); return false;
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
      res.set_header("Content-Type", "application/json");
      res.body = *document;
      return false;
    }
    case RouteId::kModels: handle_models(req, res, false); return false;
    case RouteId::kModel: handle_models(req, res, true); return false;
    case RouteId::kTokenize: handle_tokenize(req, res); return false;
    case RouteId::kDetokenize: handle_detokenize(req, res); return false;
    case RouteId::kChatCompletions:
    case RouteId::kCompletions:
    case RouteId::kSimpleChat: return handle_generation(route, exchange, res, record);
    case RouteId::kEmbeddings: return handle_embeddings(exchange, res, record);
  }
  send_error(res, internal_error("route without a handler"));
  return false;
}

void HttpServer::finish_record(RequestRecord& record) {
  metrics_.record_request(record.endpoint, record.status, record.model);
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - record.start)
          .count();
  const auto level = is_probe(record.endpoint) ? spdlog::level::debug : spdlog::level::info;
  if (!spdlog::should_log(level)) return;
  // Fields the request has; the optional ones are empty strings otherwise, and left out.
  std::vector<LogField> fields = {
      {"id", record.id},
      {"endpoint", record.endpoint},
      {"status", int64_t{record.status}},
      {"prompt_tokens", int64_t{record.prompt_tokens}},
      {"completion_tokens", int64_t{record.completion_tokens}},
      {"ttft_ms", record.ttft_ms < 0 ? 0.0 : record.ttft_ms},
      {"total_ms", total_ms},
      {"model", record.model},
      {"finish", record.finish_reason},
      {"error", record.error},
      {"request_id", record.client_id},
      {"trace_id", record.traceparent.trace_id},
      {"parent_id", record.traceparent.parent_id},
  };
  std::erase_if(fields, [](const LogField& field) {
    const auto* text = std::get_if<std::string_view>(&field.value);
    return text != nullptr && text->empty() && field.key != "endpoint";
  });
  log_event(level, "request", fields);
}

void HttpServer::handle_ready(http::Response& res) {
  metrics_.set_ready(is_ready());
  if (is_ready()) {
    send_json(res, 200, {{"status", "ready"}});
  } else if (draining_) {
    send_error(res, unavailable("the server is shutting down", "draining", 0));
  } else {
    send_error(res, unavailable("the model is loading", "loading", 1));
  }
}

// The page may run only its own inline script and style (by hash) and talk only to this
// server; it loads nothing else and may not be framed.
void HttpServer::handle_chat_page(http::Response& res) {
  const EmbeddedPage& page = chat_page();
  static const std::string policy = fmt::format(
      "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; "
      "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
      page.script_sha256, page.style_sha256);
  res.status = 200;
  res.set_header("Content-Type", "text/html; charset=utf-8");
  res.set_header("Content-Security-Policy", policy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  // No validator is sent: the small page is fetched again on each load, never stale.
  res.set_header("Cache-Control", "no-cache");
  res.body = std::string(page.html);
}

void HttpServer::handle_metrics(http::Response& res) {
  MetricsSnapshot snapshot;
  if (auto models = registry()) {
    // Counters of closed versions first, so that an unload or reload never lowers a total.
    snapshot.engine = models->retired_engine_totals();
    models->for_each_loaded([&](const std::string&, ModelService& model) {
      add_engine_stats(snapshot.engine, model.engines().stats());
      for (size_t i = 0; i < model.engines().size(); ++i) {
        snapshot.replicas.push_back(model.engines().replica_stats(i));
      }
    });
    snapshot.models = models->status();
  }
  metrics_.set_ready(is_ready());
  if (gpu_metrics_) snapshot.gpus = gpu_metrics_->sample();
  if (uses_cuda_) snapshot.device_pool_bytes = device_pool_live_bytes();
  res.status = 200;
  res.set_header("Content-Type", "text/plain; version=0.0.4");
  res.body = metrics_.render(snapshot);
}

namespace {

// `alias`: the entry of one of the model's aliases ("alias_of" names the model).
json model_entry(const ModelStatus& status, const std::string& alias = {}) {
  json entry = {{"id", alias.empty() ? status.name : alias},
                {"object", "model"},
                {"created", status.created},
                {"owned_by", "llamaserve"},
                {"state", model_state_name(status.state)}};
  if (!alias.empty()) entry["alias_of"] = status.name;
  if (status.context_tokens > 0) entry["context_length"] = status.context_tokens;
  if (!status.error.empty()) entry["error"] = unicode::sanitize_utf8(status.error);
  return entry;
}

}  // namespace

void HttpServer::handle_models(const http::Request& req, http::Response& res, bool single) {
  auto models = registry();
  std::vector<ModelStatus> list;
  if (models) {
    list = models->status();
  } else {
    ModelStatus loading;
    loading.name = model_name_;
    loading.state = ModelState::kLoading;
    list.push_back(loading);
  }
  if (!single) {
    json data = json::array();
    for (const ModelStatus& status : list) {
      data.push_back(model_entry(status));
      // An alias is listed too, for clients that look their model name up.
      for (const std::string& alias : status.aliases) data.push_back(model_entry(status, alias));
    }
    send_json(res, 200, {{"object", "list"}, {"data", data}});
    return;
  }
  constexpr std::string_view kPrefix = "/v1/models/";
  const std::string requested = http::percent_decode(
      std::string_view(req.path).substr(std::min(req.path.size(), kPrefix.size())));
  std::string served;
  for (const ModelStatus& status : list) {
    if (status.name == requested) return send_json(res, 200, model_entry(status));
    for (const std::string& alias : status.aliases) {
      if (alias == requested) return send_json(res, 200, model_entry(status, alias));
    }
    served += (served.empty() ? "'" : ", '") + status.name + "'";
  }
  send_error(res, not_found(fmt::format("model '{}' is not served here; this server serves {}",
                                        unicode::sanitize_utf8(requested), served),
                            "model_not_found"));
}

ApiError model_unavailable(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound: return not_found(status.message(), "model_not_found");
    case StatusCode::kResourceExhausted: return unavailable(status.message(), "model_capacity", 5);
    default: return unavailable(status.message(), "model_unavailable", 1);
  }
}

namespace {

// The "model" field of a JSON body, or "" (the default model).
std::string model_field(const json& body) {
  auto it = body.find("model");
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

void HttpServer::handle_tokenize(const http::Request& req, http::Response& res) {
  auto body = parse_json_object(req.body);
  if (!body) return send_error(res, api_error_from_status(body.status()));
  auto parsed = parse_tokenize(*body);
  if (!parsed) return send_error(res, request_error(parsed.status()));
  auto lease = lease_model(model_field(*body));
  if (!lease) return send_error(res, model_unavailable(lease.status()));
  std::vector<int32_t> tokens = lease->service().tokenizer().encode(
      parsed->content, parsed->add_special, parsed->parse_special);
  send_json(res, 200, {{"tokens", tokens}});
}

void HttpServer::handle_detokenize(const http::Request& req, http::Response& res) {
  auto body = parse_json_object(req.body);
  if (!body) return send_error(res, api_error_from_status(body.status()));
  auto tokens = parse_detokenize(*body);
  if (!tokens) return send_error(res, request_error(tokens.status()));
  auto lease = lease_model(model_field(*body));
  if (!lease) return send_error(res, model_unavailable(lease.status()));
  const Tokenizer& tokenizer = lease->service().tokenizer();
  const int32_t n_vocab = tokenizer.n_vocab();
  for (size_t i = 0; i < tokens->size(); ++i) {
    if ((*tokens)[i] >= n_vocab) {
      return send_error(res, invalid_request(fmt::format("'tokens[{}]' = {} is outside the "
                                                         "vocabulary (0..{})",
                                                         i, (*tokens)[i], n_vocab - 1),
                                             "invalid_value", "tokens"));
    }
  }
  const std::string text = tokenizer.decode(*tokens, /*skip_special=*/false);
  send_json(res, 200, {{"content", unicode::sanitize_utf8(text)}});
}

}  // namespace llamaserve::server
